#include "tools/commands.h"

namespace vi::cli {

void register_commands(CLI::App& app) {
  register_chat(app);
  register_generate(app);
  register_perplexity(app);
  register_logits(app);
  register_bench(app);
  register_hwcheck(app);
  register_serve(app);
  register_make_model(app);
}

}  // namespace vi::cli
