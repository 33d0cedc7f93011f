// Syntax tree of a parsed chat template: expressions and statements. Every node keeps
// the byte offset of its first token so runtime errors can name a line.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace vi::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arg {
  std::string name;  // empty for positional
  ExprPtr value;
};

struct Expr {
  enum class Type {
    Const,     // value
    Name,      // name
    GetAttr,   // a.name
    GetItem,   // a[b]
    Slice,     // a[b:c:d] (b, c, d may be null)
    Call,      // a(args)
    Filter,    // a | name(args); a is null inside filter blocks
    Test,      // a is [not] name(args)
    Not,       // not a
    Neg,       // -a
    Pos,       // +a
    Binary,    // a op b: + - * / // % ** and or
    Concat,    // a ~ b ~ ...  (items)
    Compare,   // a op1 b op2 c ... (items[0], ops[i] items[i+1])
    CondExpr,  // b if a else c
    List,      // [items] / (items,)
    Dict,      // {items[0]: items[1], ...}
  };
  Type type;
  size_t pos = 0;
  Value value;
  std::string name;  // variable / attribute / filter / test name, or operator
  bool negated = false;
  bool tuple = false;
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;
  std::vector<Arg> args;

  Expr(Type t, size_t p) : type(t), pos(p) {}
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// A `{% set %}` / `{% for %}` target: names, possibly a tuple of names, or ns.attr.
struct Target {
  std::vector<std::string> names;
  bool tuple = false;
  std::string ns_attr;  // non-empty: names[0].ns_attr
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  enum class Type { Text, Print, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Scope, Break, Continue };
  Type type;
  size_t pos = 0;
  std::string text;  // Text
  ExprPtr expr;      // Print value, For iterable, Set value, CallBlock call
  ExprPtr cond;      // For filter
  Target target;     // For / Set / SetBlock
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition, body)...
  Body body, else_body;
  std::string name;                   // Macro name
  std::vector<MacroParam> params;     // Macro / CallBlock caller params
  std::vector<ExprPtr> filters;       // SetBlock / FilterBlock: Filter nodes with a == null
  std::vector<std::pair<Target, ExprPtr>> assigns;  // With

  Stmt(Type t, size_t p) : type(t), pos(p) {}
};

struct Template {
  std::string source;  // normalised source (positions refer to it)
  Body body;
};

// Parses a template; throws vi::Error with line and column on a syntax error.
std::shared_ptr<const Template> parse_template(std::string_view source);

}  // namespace vi::jinja
