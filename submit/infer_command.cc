// dtrain-submit infer model.dtm --input X --output Y: predictions keyed by the input's key
// column, row number or (a folder of images) file path, one CSV line per example, in the
// format of core/infer/prediction_writer.h. With --cluster it is a job of the cluster's
// (submit/cluster_task_command.cc).
#include <cstdio>

#include "core/infer/keyed_examples.h"
#include "core/infer/prediction_writer.h"
#include "core/io/saved_model.h"
#include "core/util/error.h"
#include "submit/commands.h"
#include "submit/exit_codes.h"

namespace dtrain::submit {

int run_infer(const InferArgs& args) {
  core::SavedModel saved;
  core::KeyedExamples in;
  try {
    saved = core::load_saved_model(args.model_path);
    in = core::read_keyed_examples({args.input, args.key_column, args.header},
                                   saved.model->input_shape());
    saved.normalizer.apply(in.features);
  } catch (const core::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  }
  std::FILE* out = args.output == "-" ? stdout : std::fopen(args.output.c_str(), "w");
  if (!out) {
    std::fprintf(stderr, "error: cannot write '%s'\n  fix: check the directory exists and is "
                         "writable\n", args.output.c_str());
    return kExitBadInput;
  }
  const core::PredictionWriter writer(saved);
  std::fputs(writer.header().c_str(), out);
  writer.write(*saved.model, in, 0, in.size(), args.batch_size, out);
  if (out != stdout) std::fclose(out);
  if (args.output != "-")
    std::fprintf(stderr, "wrote %lld predictions to %s\n", (long long)in.size(),
                 args.output.c_str());
  return kExitSuccess;
}

}  // namespace dtrain::submit
