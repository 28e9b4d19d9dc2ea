// The library builds in unity batches (src/CMakeLists.txt): several .cpp files
// become one translation unit, so a name one file defines at namespace scope
// (in an anonymous namespace or not) is visible to the files batched after
// it. Two files defining the same name in the same namespace either fail to
// compile or, worse, compile with one file's calls resolved to the other's
// overload. This test reads the sources and fails on any such pair, whatever
// the batching of the day, naming both files.
//
// What it reads, in the codebase's layout: `namespace x {` / `}  // namespace`
// lines, and definitions and declarations that start in column 0 (functions,
// variables, classes, aliases). An alias may repeat with the same meaning, and
// a using-declaration may repeat; anything else is one file's own.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace neuron {
namespace {

namespace fs = std::filesystem;

// Files compiled alone (SKIP_UNITY_BUILD_INCLUSION in src/CMakeLists.txt).
bool compiled_alone(const std::string& rel) {
  return rel.starts_with("backend/cpu/") || rel.starts_with("quant/") || rel == "tokenizer/regex.cpp";
}

struct NamespaceDefinition {
  std::string file;
  std::string text;  // an alias's or using-declaration's whole line, else empty
};
using Definitions = std::map<std::pair<std::string, std::string>, std::vector<NamespaceDefinition>>;

std::string strip_comment(const std::string& line) {
  const auto at = line.find("//");
  return at == std::string::npos ? line : line.substr(0, at);
}

// (namespace, name) -> where it is defined, for one file's lines.
void collect_definitions(const std::string& rel, std::istream& in, Definitions& out) {
  static const std::regex open_ns(R"(^namespace\s*([\w:]*)\s*\{)");
  static const std::regex close_ns(R"(^\}\s*//\s*namespace)");
  static const std::regex alias(R"(^using\s+(\w+)\s*=)");
  static const std::regex using_decl(R"(^using\s+[\w:]+::(\w+)\s*;)");
  static const std::regex ns_alias(R"(^namespace\s+(\w+)\s*=)");
  static const std::regex type(R"(^(?:struct|class|enum\s+class|enum|union)\s+(\w+))");
  static const std::regex entity(R"(^(?:\[\[\w+\]\]\s*)?[\w:<>,*&\s]*?\b(\w+)\s*(?:\(|=|\{|;|\[))");
  std::vector<std::string> ns;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, open_ns)) {
      ns.push_back(m[1].str());
      continue;
    }
    if (std::regex_search(line, close_ns)) {
      if (!ns.empty()) ns.pop_back();
      continue;
    }
    const std::string code = strip_comment(line);
    if (code.empty() || std::string(" \t#}{/").find(code[0]) != std::string::npos) continue;
    if (code.starts_with("template") || code.starts_with("using namespace") || code.starts_with("extern \"C\"") ||
        code.starts_with("static_assert") || code.starts_with("NEURON_COMMAND"))
      continue;
    std::string scope;
    for (const auto& n : ns)
      if (!n.empty()) scope += (scope.empty() ? "" : "::") + n;
    std::string name, text;
    if (std::regex_search(code, m, alias) || std::regex_search(code, m, using_decl) ||
        std::regex_search(code, m, ns_alias)) {
      name = m[1].str();
      text = code;
    } else if (std::regex_search(code, m, type)) {
      name = m[1].str();
    } else if (std::regex_search(code, m, entity)) {
      std::string head = code.substr(0, static_cast<std::size_t>(m.position(1)));
      while (!head.empty() && head.back() == ' ') head.pop_back();
      if (head.ends_with("::")) continue;  // Class::member, defined out of its class
      name = m[1].str();
    }
    if (name.empty() || name == "operator") continue;
    out[{scope, name}].push_back({rel, text});
  }
}

TEST(UnityNames, NoTwoBatchedLibraryFilesDefineOneNameInOneNamespace) {
  const fs::path src = fs::path(NEURON_REPO_ROOT) / "src";
  Definitions defs;
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    if (!e.is_regular_file() || e.path().extension() != ".cpp") continue;
    const std::string rel = fs::relative(e.path(), src).generic_string();
    if (compiled_alone(rel)) continue;
    std::ifstream in(e.path());
    collect_definitions(rel, in, defs);
    ++files;
  }
  ASSERT_GT(files, 50u) << "the library's sources were not found under " << src;
  std::ostringstream clashes;
  for (const auto& [key, where] : defs) {
    std::set<std::string> in_files, texts;
    bool all_repeatable = true;
    for (const auto& d : where) {
      in_files.insert(d.file);
      texts.insert(d.text);
      all_repeatable = all_repeatable && !d.text.empty();
    }
    if (in_files.size() < 2) continue;
    if (all_repeatable && texts.size() == 1) continue;  // the same alias or using-declaration again
    clashes << "  " << (key.first.empty() ? "(global)" : key.first) << "::" << key.second << " in";
    for (const auto& f : in_files) clashes << " " << f;
    clashes << "\n";
  }
  EXPECT_TRUE(clashes.str().empty()) << "names defined in more than one library file of one namespace (rename one, "
                                        "or share one definition from a header):\n"
                                     << clashes.str();
}

// The reader itself: it sees a clash between two files and none inside one.
TEST(UnityNames, TheReaderFindsAFunctionDefinedInTwoFiles) {
  Definitions defs;
  std::istringstream a("namespace neuron::x {\nnamespace {\n\nstd::string trim(std::string s) {\n  return s;\n}\n\n"
                       "}  // namespace\n}  // namespace neuron::x\n");
  std::istringstream b("namespace neuron::x {\nnamespace {\n\nstd::string_view trim(std::string_view s) { return s; }\n"
                       "using json = nlohmann::json;\n}  // namespace\n\nvoid Thing::trim() {}\n}  // namespace neuron::x\n");
  collect_definitions("a.cpp", a, defs);
  collect_definitions("b.cpp", b, defs);
  ASSERT_EQ(defs.count({"neuron::x", "trim"}), 1u);
  EXPECT_EQ(defs.at({"neuron::x", "trim"}).size(), 2u);  // both files' trim, not Thing::trim
  ASSERT_EQ(defs.count({"neuron::x", "json"}), 1u);
  EXPECT_EQ(defs.at({"neuron::x", "json"}).at(0).text, "using json = nlohmann::json;");
}

}  // namespace
}  // namespace neuron
