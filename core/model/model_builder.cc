#include "core/model/model_builder.h"

#include "core/layers/batch_norm.h"
#include "core/layers/conv2d.h"
#include "core/layers/dense.h"
#include "core/layers/dropout.h"
#include "core/layers/flatten.h"
#include "core/layers/global_pooling.h"
#include "core/layers/merge.h"
#include "core/layers/output.h"
#include "core/layers/subsampling.h"
#include "core/model/model_graph.h"

namespace dtrain::core {

std::unique_ptr<Layer> make_layer(const ModelSpec& model, const LayerSpec& l,
                                  const std::vector<Shape>& input_shapes) {
  const Shape& shape = input_shapes.at(0);
  switch (l.kind) {
    case LayerSpec::Kind::kDense:
      return std::make_unique<DenseLayer>(shape, l.units, l.activation, model.weight_init);
    case LayerSpec::Kind::kOutput:
      return std::make_unique<OutputLayer>(shape, l.units, l.activation, l.loss,
                                           model.weight_init);
    case LayerSpec::Kind::kConvolution:
      return std::make_unique<Conv2dLayer>(shape, l.conv, model.weight_init);
    case LayerSpec::Kind::kSubsampling:
      return std::make_unique<SubsamplingLayer>(shape, l.pool);
    case LayerSpec::Kind::kGlobalPooling:
      return std::make_unique<GlobalPoolingLayer>(shape, l.global_max);
    case LayerSpec::Kind::kBatchNorm:
      return std::make_unique<BatchNormLayer>(shape, l.bn_decay, l.bn_eps, l.activation);
    case LayerSpec::Kind::kDropout:
      return std::make_unique<DropoutLayer>(shape, l.dropout_rate);
    case LayerSpec::Kind::kAdd:
      return std::make_unique<AddLayer>(input_shapes, l.activation);
    case LayerSpec::Kind::kConcat:
      return std::make_unique<ConcatLayer>(input_shapes);
    case LayerSpec::Kind::kFlatten:
      return std::make_unique<FlattenLayer>(shape);
  }
  throw UserError("unknown layer kind", "");
}

std::vector<std::unique_ptr<Layer>> build_layers(const ModelSpec& spec) {
  return std::move(build_graph(spec).layers);
}

ModelCounts count_model(const ModelSpec& spec) {
  ModelCounts c;
  for (const auto& layer : build_layers(spec)) {
    c.params += layer->num_params();  // each layer's count was bounded when it was built
    c.state += layer->num_state();
  }
  return c;
}

}  // namespace dtrain::core
