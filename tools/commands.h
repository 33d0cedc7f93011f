// Registration of the voltinfer subcommands (each defined in its own cmd_*.cpp).
#pragma once

#include <CLI/CLI.hpp>

namespace vi::cli {

void register_commands(CLI::App& app);

void register_generate(CLI::App& app);
void register_chat(CLI::App& app);
void register_logits(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_bench(CLI::App& app);
void register_hwcheck(CLI::App& app);
void register_serve(CLI::App& app);
void register_make_model(CLI::App& app);

}  // namespace vi::cli
