#include "core/model/model_builder.h"

#include "core/layers/batch_norm.h"
#include "core/layers/conv2d.h"
#include "core/layers/dense.h"
#include "core/layers/dropout.h"
#include "core/layers/global_pooling.h"
#include "core/layers/output.h"
#include "core/layers/subsampling.h"

namespace dtrain::core {

std::vector<std::unique_ptr<Layer>> build_layers(const ModelSpec& spec) {
  std::vector<std::unique_ptr<Layer>> layers;
  Shape shape = spec.input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    try {
      switch (l.kind) {
        case LayerSpec::Kind::kDense:
          layers.push_back(
              std::make_unique<DenseLayer>(shape, l.units, l.activation, spec.weight_init));
          break;
        case LayerSpec::Kind::kOutput:
          layers.push_back(std::make_unique<OutputLayer>(shape, l.units, l.activation, l.loss,
                                                         spec.weight_init));
          break;
        case LayerSpec::Kind::kConvolution:
          layers.push_back(std::make_unique<Conv2dLayer>(shape, l.conv, spec.weight_init));
          break;
        case LayerSpec::Kind::kSubsampling:
          layers.push_back(std::make_unique<SubsamplingLayer>(shape, l.pool));
          break;
        case LayerSpec::Kind::kGlobalPooling:
          layers.push_back(std::make_unique<GlobalPoolingLayer>(shape, l.global_max));
          break;
        case LayerSpec::Kind::kBatchNorm:
          layers.push_back(std::make_unique<BatchNormLayer>(shape, l.bn_decay, l.bn_eps));
          break;
        case LayerSpec::Kind::kDropout:
          layers.push_back(std::make_unique<DropoutLayer>(shape, l.dropout_rate));
          break;
      }
    } catch (const LayerShapeError&) {
      throw;
    } catch (const UserError& e) {
      throw LayerShapeError(i, e);
    }
    shape = layers.back()->output_shape();
  }
  return layers;
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
