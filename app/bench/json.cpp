#include "bench/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cli/report.h"

namespace cuflash::bench {

Json Json::array() {
  Json j;
  j.type_ = Type::array;
  return j;
}

Json Json::object() {
  Json j;
  j.type_ = Type::object;
  return j;
}

Json& Json::set(const std::string& key, Json value) {
  type_ = Type::object;
  for (auto& member : members_) {
    if (member.first == key) {
      member.second = std::move(value);
      return *this;
    }
  }
  members_.emplace_back(key, std::move(value));
  return *this;
}

Json& Json::push(Json value) {
  type_ = Type::array;
  items_.push_back(std::move(value));
  return *this;
}

const Json* Json::find(const std::string& key) const {
  for (const auto& member : members_) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

std::string json_quote(const std::string& text) {
  return "\"" + cli::json_escape(text) + "\"";
}

std::string shortest_double(double value) {
  // 15 significant digits are exact for most values; 17 always round-trip.
  char buffer[32];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

namespace {

void newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent * depth), ' ');
}

}  // namespace

void Json::write(std::string& out, int indent, int depth) const {
  switch (type_) {
    case Type::null: out += "null"; return;
    case Type::boolean: out += bool_ ? "true" : "false"; return;
    case Type::integer: out += std::to_string(int_); return;
    case Type::number: out += std::isfinite(number_) ? shortest_double(number_) : "null"; return;
    case Type::string: out += json_quote(string_); return;
    case Type::array:
      out += '[';
      for (size_t i = 0; i < items_.size(); ++i) {
        out += i ? (indent < 0 ? ", " : ",") : "";
        newline(out, indent, depth + 1);
        items_[i].write(out, indent, depth + 1);
      }
      if (!items_.empty()) newline(out, indent, depth);
      out += ']';
      return;
    case Type::object:
      out += '{';
      for (size_t i = 0; i < members_.size(); ++i) {
        out += i ? (indent < 0 ? ", " : ",") : "";
        newline(out, indent, depth + 1);
        out += json_quote(members_[i].first) + ": ";
        members_[i].second.write(out, indent, depth + 1);
      }
      if (!members_.empty()) newline(out, indent, depth);
      out += '}';
      return;
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  write(out, indent, 0);
  if (indent >= 0) out += '\n';
  return out;
}

}  // namespace cuflash::bench
