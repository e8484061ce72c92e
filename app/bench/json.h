// A small JSON value for the documents `cuflash bench` writes (results in Google Benchmark's
// schema, package metadata, failure lists): null, bool, number, string, array, and object with
// keys kept in insertion order, printed with two-space indentation. Writing only; no parser.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cuflash::bench {

class Json {
 public:
  enum class Type { null, boolean, integer, number, string, array, object };

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool value) : type_(Type::boolean), bool_(value) {}
  Json(int value) : Json(static_cast<int64_t>(value)) {}
  Json(int64_t value) : type_(Type::integer), int_(value) {}
  Json(uint64_t value) : Json(static_cast<int64_t>(value)) {}
  Json(double value) : type_(Type::number), number_(value) {}
  Json(const char* value) : type_(Type::string), string_(value) {}
  Json(std::string value) : type_(Type::string), string_(std::move(value)) {}

  static Json array();
  static Json object();
  template <typename T>
  static Json array_of(const std::vector<T>& values) {
    Json a = array();
    for (const T& v : values) a.push(Json(v));
    return a;
  }

  // Objects: sets `key` (replacing an earlier value of the same key in place).
  Json& set(const std::string& key, Json value);
  // Arrays: appends.
  Json& push(Json value);

  Type type() const { return type_; }
  // Object member, or nullptr when absent (or not an object).
  const Json* find(const std::string& key) const;
  // The value of a string; "" for other types.
  const std::string& text() const { return string_; }
  size_t size() const { return type_ == Type::array ? items_.size() : members_.size(); }
  const Json& at(size_t index) const { return items_.at(index); }

  // Pretty-printed with two-space indents and a trailing newline at the top level when `indent`
  // is >= 0; on one line otherwise. Non-finite numbers print as null.
  std::string dump(int indent = 2) const;

 private:
  void write(std::string& out, int indent, int depth) const;

  Type type_ = Type::null;
  bool bool_ = false;
  int64_t int_ = 0;
  double number_ = 0;
  std::string string_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

// A JSON string literal (quoted, escaped) for `text`.
std::string json_quote(const std::string& text);

// Decimal text that reads back as the same double, as short as 15 to 17 digits allow
// ("0.1", "1e-05", "42").
std::string shortest_double(double value);

}  // namespace cuflash::bench
