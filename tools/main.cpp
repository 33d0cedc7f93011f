// voltinfer: the command-line entry point. Each subcommand lives in its own cmd_*.cpp.
#include <cstdio>
#include <exception>

#include "core/error.h"
#include "tools/commands.h"
#include "tools/common.h"

int main(int argc, char** argv) {
  CLI::App app{
      "voltinfer — LLM inference on NVIDIA GPUs (Volta and newer) and the CPU.\n"
      "Without -m the bundled default model (SmolLM2-135M-Instruct, Q4_1) is used.\n\n"
      "Examples:\n"
      "  voltinfer chat                                   talk to the default model\n"
      "  voltinfer generate -p \"Once upon a time\" -n 64   continue a text\n"
      "  voltinfer chat -m model.gguf -c 8192             another model, larger context\n"
      "  voltinfer logits --tokens 1,2,3 --out l.safetensors\n"
      "  voltinfer perplexity -f wiki.txt                 how well the model predicts a text\n"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every command");
  vi::cli::register_commands(app);
  auto args = vi::cli::normalize_args(argc, argv);
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const vi::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
