// Recursive-descent parser for the Jinja2 subset, mirroring jinja2/parser.py's
// precedence: condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary
// < postfix (. [] ()) and filters / tests.
#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace vi::jinja {
namespace {

class Parser {
 public:
  explicit Parser(LexResult lr) : src_(std::move(lr.source)), t_(std::move(lr.tokens)) {}

  std::shared_ptr<const Template> run() {
    auto tpl = std::make_shared<Template>();
    tpl->body = parse_body({});
    if (cur().type != Tok::Eof) fail(cur().pos, "unexpected token");
    tpl->source = std::move(src_);
    return tpl;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  Token next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  [[noreturn]] void fail(size_t pos, const std::string& msg) const { syntax_error(src_, pos, msg); }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::Eof: return "end of template";
      case Tok::BlockEnd: return "end of statement block";
      case Tok::VarEnd: return "end of print statement";
      case Tok::Data: return "template data";
      case Tok::String: return "string literal";
      case Tok::Int:
      case Tok::Float: return "number '" + t.text + "'";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(cur().pos, fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail(cur().pos, fmt::format("expected a name, got {}", describe(cur())));
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd)
      fail(cur().pos, fmt::format("expected end of statement block, got {}", describe(cur())));
    ++i_;
  }

  // ---- statements ----
  // Parses until one of `end_tags` opens a block tag (the tag name is left current).
  Body parse_body(const std::vector<std::string>& end_tags) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (!end_tags.empty())
          fail(t.pos, fmt::format("unexpected end of template; expected '{}'", fmt::join(end_tags, "' or '")));
        return body;
      }
      if (t.type == Tok::Data) {
        auto s = std::make_unique<Stmt>(Stmt::Type::Text, t.pos);
        s->text = t.text;
        body.push_back(std::move(s));
        ++i_;
      } else if (t.type == Tok::VarBegin) {
        ++i_;
        auto s = std::make_unique<Stmt>(Stmt::Type::Print, t.pos);
        s->expr = parse_tuple(false);
        if (cur().type != Tok::VarEnd)
          fail(cur().pos, fmt::format("expected end of print statement, got {}", describe(cur())));
        ++i_;
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        const Token& name = peek();
        if (name.type != Tok::Name) fail(name.pos, "tag name expected");
        for (const auto& e : end_tags)
          if (name.text == e) {
            ++i_;  // leave the tag name current
            return body;
          }
        ++i_;
        body.push_back(parse_statement());
      } else {
        fail(t.pos, fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  StmtPtr parse_statement() {
    const Token tag = next();
    DepthGuard guard(*this, tag.pos);
    const std::string& n = tag.text;
    if (n == "if") return parse_if(tag.pos);
    if (n == "for") return parse_for(tag.pos);
    if (n == "set") return parse_set(tag.pos);
    if (n == "macro") return parse_macro(tag.pos);
    if (n == "call") return parse_call_block(tag.pos);
    if (n == "filter") return parse_filter_block(tag.pos);
    if (n == "with") return parse_with(tag.pos);
    if (n == "generation") {
      // transformers' {% generation %} marks assistant tokens; rendering just emits the body.
      expect_block_end();
      auto s = std::make_unique<Stmt>(Stmt::Type::Scope, tag.pos);
      s->body = parse_body({"endgeneration"});
      end_tag();
      return s;
    }
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail(tag.pos, fmt::format("'{}' outside of a for loop", n));
      expect_block_end();
      return std::make_unique<Stmt>(n == "break" ? Stmt::Type::Break : Stmt::Type::Continue, tag.pos);
    }
    fail(tag.pos, fmt::format("Encountered unknown tag '{}'", n));
  }

  void end_tag() {  // consumes the end tag name, then '%}'
    ++i_;
    expect_block_end();
  }

  StmtPtr parse_if(size_t pos) {
    auto s = std::make_unique<Stmt>(Stmt::Type::If, pos);
    ExprPtr cond = parse_tuple(false);
    expect_block_end();
    while (true) {
      Body b = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(b));
      const std::string tag = cur().text;
      ++i_;
      if (tag == "elif") {
        cond = parse_tuple(false);
        expect_block_end();
        continue;
      }
      if (tag == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"});
        end_tag();
      } else {
        expect_block_end();
      }
      return s;
    }
  }

  Target parse_assign_target(bool allow_ns, bool allow_tuple) {
    Target t;
    const size_t p = cur().pos;
    std::string first = expect_name();
    if (allow_ns && skip_op(".")) {
      t.names.push_back(first);
      t.ns_attr = expect_name();
      return t;
    }
    t.names.push_back(first);
    while (allow_tuple && skip_op(",")) {
      t.tuple = true;
      if (cur().type != Tok::Name) break;
      t.names.push_back(expect_name());
    }
    for (const auto& nm : t.names)
      if (nm == "true" || nm == "false" || nm == "none" || nm == "True" || nm == "False" || nm == "None")
        fail(p, fmt::format("can't assign to constant '{}'", nm));
    return t;
  }

  StmtPtr parse_for(size_t pos) {
    auto s = std::make_unique<Stmt>(Stmt::Type::For, pos);
    s->target = parse_assign_target(false, true);
    if (!skip_name("in")) fail(cur().pos, fmt::format("expected 'in', got {}", describe(cur())));
    s->expr = parse_tuple(true);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail(cur().pos, "recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"});
    --loop_depth_;
    if (cur().text == "else") {
      ++i_;
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    end_tag();
    return s;
  }

  StmtPtr parse_set(size_t pos) {
    Target target = parse_assign_target(true, true);
    if (skip_op("=")) {
      auto s = std::make_unique<Stmt>(Stmt::Type::Set, pos);
      s->target = std::move(target);
      s->expr = parse_tuple(false);
      expect_block_end();
      return s;
    }
    if (target.tuple || !target.ns_attr.empty()) fail(cur().pos, "a block set takes a single name");
    auto s = std::make_unique<Stmt>(Stmt::Type::SetBlock, pos);
    s->target = std::move(target);
    s->filters = parse_filter_chain();
    expect_block_end();
    s->body = parse_body({"endset"});
    end_tag();
    return s;
  }

  std::vector<ExprPtr> parse_filter_chain() {
    std::vector<ExprPtr> out;
    while (skip_op("|")) out.push_back(parse_filter_call(nullptr));
    return out;
  }

  std::vector<MacroParam> parse_signature() {
    std::vector<MacroParam> ps;
    expect_op("(");
    while (!is_op(")")) {
      if (!ps.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      ps.push_back(std::move(p));
    }
    expect_op(")");
    return ps;
  }

  StmtPtr parse_macro(size_t pos) {
    auto s = std::make_unique<Stmt>(Stmt::Type::Macro, pos);
    s->name = expect_name();
    s->params = parse_signature();
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved;
    end_tag();
    return s;
  }

  StmtPtr parse_call_block(size_t pos) {
    auto s = std::make_unique<Stmt>(Stmt::Type::CallBlock, pos);
    if (is_op("(")) s->params = parse_signature();
    s->expr = parse_expression(true);
    if (s->expr->type != Expr::Type::Call) fail(pos, "expected call");
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endcall"});
    loop_depth_ = saved;
    end_tag();
    return s;
  }

  StmtPtr parse_filter_block(size_t pos) {
    auto s = std::make_unique<Stmt>(Stmt::Type::FilterBlock, pos);
    s->filters.push_back(parse_filter_call(nullptr));
    while (skip_op("|")) s->filters.push_back(parse_filter_call(nullptr));
    expect_block_end();
    s->body = parse_body({"endfilter"});
    end_tag();
    return s;
  }

  StmtPtr parse_with(size_t pos) {
    auto s = std::make_unique<Stmt>(Stmt::Type::With, pos);
    while (cur().type != Tok::BlockEnd) {
      if (!s->assigns.empty()) expect_op(",");
      Target t = parse_assign_target(false, false);
      expect_op("=");
      s->assigns.emplace_back(std::move(t), parse_expression(true));
    }
    expect_block_end();
    s->body = parse_body({"endwith"});
    end_tag();
    return s;
  }

  // ---- expressions ----
  ExprPtr make(Expr::Type t, size_t pos) { return std::make_unique<Expr>(t, pos); }

  bool is_tuple_end() const {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof) return true;
    if (t.type == Tok::Op && t.text == ")") return true;
    return false;
  }

  // Comma-separated expressions become a tuple. `for_iter` stops at `if` (for-loop filter)
  // and parses without inline if-else, as Jinja does.
  ExprPtr parse_tuple(bool for_iter, bool explicit_parens = false) {
    const size_t pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end() || (for_iter && is_name("if"))) break;
      items.push_back(parse_expression(!for_iter));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(cur().pos, fmt::format("Expected an expression, got {}", describe(cur())));
    }
    auto e = make(Expr::Type::List, pos);
    e->tuple = true;
    e->items = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    const size_t pos = cur().pos;
    ExprPtr e1 = parse_or();
    while (skip_name("if")) {
      auto e = make(Expr::Type::CondExpr, pos);
      e->a = parse_or();  // condition
      if (skip_name("else")) e->c = parse_condexpr();
      e->b = std::move(e1);
      e1 = std::move(e);
    }
    return e1;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, size_t pos) {
    auto e = make(Expr::Type::Binary, pos);
    e->name = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprPtr parse_or() {
    const size_t pos = cur().pos;
    ExprPtr l = parse_and();
    while (skip_name("or")) l = binary("or", std::move(l), parse_and(), pos);
    return l;
  }

  ExprPtr parse_and() {
    const size_t pos = cur().pos;
    ExprPtr l = parse_not();
    while (skip_name("and")) l = binary("and", std::move(l), parse_not(), pos);
    return l;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const size_t pos = next().pos;
      auto e = make(Expr::Type::Not, pos);
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const size_t pos = cur().pos;
    ExprPtr first = parse_math1();
    auto e = make(Expr::Type::Compare, pos);
    while (true) {
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        e->ops.push_back(next().text);
      } else if (is_name("in")) {
        ++i_;
        e->ops.push_back("in");
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        i_ += 2;
        e->ops.push_back("notin");
      } else {
        break;
      }
      e->items.push_back(parse_math1());
    }
    if (e->ops.empty()) return first;
    e->items.insert(e->items.begin(), std::move(first));
    return e;
  }

  ExprPtr parse_math1() {
    const size_t pos = cur().pos;
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = next().text;
      l = binary(op, std::move(l), parse_concat(), pos);
    }
    return l;
  }

  ExprPtr parse_concat() {
    const size_t pos = cur().pos;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(Expr::Type::Concat, pos);
    e->items.push_back(std::move(first));
    while (skip_op("~")) e->items.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    const size_t pos = cur().pos;
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = next().text;
      l = binary(op, std::move(l), parse_pow(), pos);
    }
    return l;
  }

  ExprPtr parse_pow() {
    const size_t pos = cur().pos;
    ExprPtr l = parse_unary(true);
    while (skip_op("**")) l = binary("**", std::move(l), parse_unary(true), pos);
    return l;
  }

  // Bounds recursion so a hostile template ("((((...") fails cleanly instead of
  // overflowing the stack.
  struct DepthGuard {
    Parser& p;
    DepthGuard(Parser& parser, size_t pos) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail(pos, "template nests too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };
  static constexpr int kMaxDepth = 128;

  ExprPtr parse_unary(bool with_filter) {
    const size_t pos = cur().pos;
    DepthGuard guard(*this, pos);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const bool neg = next().text == "-";
      node = make(neg ? Expr::Type::Neg : Expr::Type::Pos, pos);
      node->a = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.type == Tok::Name) {
      ++i_;
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        auto e = make(Expr::Type::Const, t.pos);
        e->value = Value(t.text == "true" || t.text == "True");
        return e;
      }
      if (t.text == "none" || t.text == "None") {
        auto e = make(Expr::Type::Const, t.pos);
        e->value = Value::none();
        return e;
      }
      auto e = make(Expr::Type::Name, t.pos);
      e->name = t.text;
      return e;
    }
    if (t.type == Tok::String) {
      const size_t pos = t.pos;
      std::string s;
      while (cur().type == Tok::String) s += next().text;  // adjacent literals concatenate
      auto e = make(Expr::Type::Const, pos);
      e->value = Value(std::move(s));
      return e;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      ++i_;
      auto e = make(Expr::Type::Const, t.pos);
      e->value = t.type == Tok::Int ? Value(t.ival) : Value(t.fval);
      return e;
    }
    if (is_op("(")) {
      ++i_;
      ExprPtr e = parse_tuple(false, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = make(Expr::Type::List, next().pos);
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      auto e = make(Expr::Type::Dict, next().pos);
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->items.push_back(parse_expression(true));
        expect_op(":");
        e->items.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail(t.pos, fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        ++i_;
        node = parse_filter_call(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token t = next();
    if (t.text == ".") {
      const Token attr = next();
      if (attr.type == Tok::Name) {
        auto e = make(Expr::Type::GetAttr, t.pos);
        e->a = std::move(node);
        e->name = attr.text;
        return e;
      }
      if (attr.type != Tok::Int) fail(attr.pos, "expected name or number");
      auto e = make(Expr::Type::GetItem, t.pos);
      e->a = std::move(node);
      e->b = make(Expr::Type::Const, attr.pos);
      e->b->value = Value(attr.ival);
      return e;
    }
    // '[' subscript or slice ']'
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = make(Expr::Type::GetItem, t.pos);
    e->a = std::move(node);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      e->b = make(Expr::Type::List, t.pos);
      e->b->tuple = true;
      e->b->items = std::move(args);
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    const size_t pos = cur().pos;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    ++i_;  // ':'
    auto e = make(Expr::Type::Slice, pos);
    e->a = std::move(start);
    if (!is_op("]") && !is_op(",") && !is_op(":")) e->b = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) e->c = parse_expression(true);
    }
    return e;
  }

  void parse_call_args(std::vector<Arg>& args) {
    expect_op("(");
    bool kw_seen = false;
    while (!is_op(")")) {
      if (!args.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail(cur().pos, "*args / **kwargs in calls are not supported");
      Arg a;
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        a.name = next().text;
        ++i_;
        kw_seen = true;
      } else if (kw_seen) {
        fail(cur().pos, "positional argument follows keyword argument");
      }
      a.value = parse_expression(true);
      args.push_back(std::move(a));
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(Expr::Type::Call, cur().pos);
    e->a = std::move(node);
    parse_call_args(e->args);
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().type == Tok::Name) {
      ++i_;
      n.push_back('.');
      n += next().text;
    }
    return n;
  }

  ExprPtr parse_filter_call(ExprPtr node) {
    auto e = make(Expr::Type::Filter, cur().pos);
    e->a = std::move(node);
    e->name = dotted_name();
    if (is_op("(")) parse_call_args(e->args);
    return e;
  }

  ExprPtr parse_test(ExprPtr node) {
    auto e = make(Expr::Type::Test, next().pos);  // 'is'
    e->a = std::move(node);
    e->negated = skip_name("not");
    e->name = dotted_name();
    if (is_op("(")) {
      parse_call_args(e->args);
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail(cur().pos, "You cannot chain multiple tests with is");
      Arg a;
      a.value = parse_postfix(parse_primary());
      e->args.push_back(std::move(a));
    }
    return e;
  }

  std::string src_;
  std::vector<Token> t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

std::shared_ptr<const Template> parse_template(std::string_view source) {
  return Parser(lex(source)).run();
}

}  // namespace vi::jinja
