#include "tools/bench_prompts.h"

#include <array>

#include "core/error.h"

namespace vi::cli {

namespace {

// A tiny linear congruential generator: fixed across platforms and library versions.
struct Lcg {
  uint64_t s;
  uint32_t next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(s >> 33);
  }
  template <size_t N>
  const char* pick(const std::array<const char*, N>& a) { return a[next() % N]; }
};

std::string code_text(size_t min_chars) {
  static const std::array<const char*, 8> nouns = {"order", "invoice", "ledger", "account",
                                                   "shipment", "customer", "report", "session"};
  static const std::array<const char*, 6> verbs = {"load", "validate", "merge", "render", "archive", "price"};
  static const std::array<const char*, 5> types = {"int", "double", "std::string", "bool", "size_t"};
  Lcg r{42};
  std::string out;
  for (int file = 0; out.size() < min_chars; ++file) {
    const char* noun = r.pick(nouns);
    out += "// ===== src/" + std::string(noun) + "_" + std::to_string(file) + ".cpp =====\n";
    out += "#include \"" + std::string(noun) + ".h\"\n\nnamespace shop {\n\n";
    for (int fn = 0; fn < 6; ++fn) {
      const char* verb = r.pick(verbs);
      const char* type = r.pick(types);
      int limit = static_cast<int>(r.next() % 1000);
      out += std::string(type) + " " + verb + "_" + noun + "_" + std::to_string(fn) + "(const " + noun +
             "& item, int limit) {\n";
      out += "  // " + std::string(verb) + " the " + noun + " unless it exceeds " + std::to_string(limit) + "\n";
      out += "  if (item.size() > " + std::to_string(limit) + ") {\n    return {};\n  }\n";
      out += "  for (int i = 0; i < limit; ++i) {\n    total += item.at(i) * " + std::to_string(r.next() % 97) +
             ";\n  }\n  return total;\n}\n\n";
    }
    out += "}  // namespace shop\n\n";
  }
  return out;
}

std::string zh_text(size_t min_chars) {
  static const std::array<const char*, 8> places = {"山城", "江南小镇", "北方草原", "海边渔村",
                                                    "古老书院", "高原湖畔", "边境集市", "竹林深处"};
  static const std::array<const char*, 6> people = {"老船工", "年轻的教师", "一位画家", "守林人",
                                                    "茶农", "邮递员"};
  static const std::array<const char*, 6> acts = {"记录着四季的变化", "修补一艘旧木船", "教孩子们读书写字",
                                                  "在晨雾里采摘新茶", "沿着山路送信", "画下落日时的河流"};
  Lcg r{7};
  std::string out;
  for (int para = 0; out.size() < min_chars; ++para) {
    out += "第" + std::to_string(para + 1) + "章。在" + r.pick(places) + "，" + r.pick(people) + "每天" +
           r.pick(acts) + "。";
    out += std::string("人们说，") + r.pick(people) + "总是" + r.pick(acts) + "，而日子就这样一天天过去。";
    out += std::string("后来，") + r.pick(places) + "来了新的客人，他们" + r.pick(acts) + "，也带来了远方的消息。\n";
  }
  return out;
}

}  // namespace

std::string bench_text(const std::string& style, size_t min_chars) {
  if (style == "code") return code_text(min_chars);
  if (style == "zh") return zh_text(min_chars);
  VI_FAIL("unknown prompt style '{}' (code, zh)", style);
}

}  // namespace vi::cli
