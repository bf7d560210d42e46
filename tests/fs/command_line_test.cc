// What a user reads about the options: `tensorfs --help`, the subcommands'
// help, the generated tensorfs(8) man page and docs/CONFIGURATION.md each list
// every option of the table, and --help fits a terminal.
#include "fs/command_line.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>

#include "core/options/mount_options.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using testing::CommandResult;
using testing::ReadWhole;
using testing::RunCommand;
using testing::TensorfsBinary;

std::string FlagOf(const OptionSpec& spec) {
  std::string flag = "--" + std::string(spec.name);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The help of the command ("") or of one subcommand, as --help prints it.
std::string HelpOf(const std::string& subcommand) {
  CommandLine line;
  std::unique_ptr<CLI::App> app = MakeCommandLine(line);
  if (subcommand.empty()) return RenderHelp(*app);
  return RenderHelp(*app->get_subcommand(subcommand));
}

// "Heading:" -> the lines under it, up to the next blank line.
std::map<std::string, std::vector<std::string>> HelpSections(const std::string& help) {
  std::map<std::string, std::vector<std::string>> sections;
  std::string current;
  for (const std::string& line : Lines(help)) {
    if (line.empty()) {
      current.clear();
    } else if (line.back() == ':' && line[0] != ' ') {
      current = line.substr(0, line.size() - 1);
    } else if (!current.empty()) {
      sections[current].push_back(line);
    }
  }
  return sections;
}

// The entry of `flag` among a section's lines: its names and text, the
// continuation lines joined on ("" when the flag is not there).
std::string EntryOf(const std::vector<std::string>& lines, const std::string& flag) {
  const std::regex names_hold_flag("(^|[ ,])" + flag + "( |,|$)");
  std::string entry;
  for (const std::string& line : lines) {
    const bool starts_entry = line.starts_with("  -");
    if (starts_entry && !entry.empty()) break;
    if (starts_entry) {
      if (!std::regex_search(line.substr(0, line.find("  ", 2)), names_hold_flag)) continue;
      entry = line;
    } else if (!entry.empty()) {
      entry += " " + line.substr(line.find_first_not_of(' '));
    }
  }
  return entry;
}

TEST(HelpTest, ListsEveryOptionUnderItsGroupWithItsDefault) {
  const auto sections = HelpSections(HelpOf(""));
  for (const OptionSpec& spec : AllMountOptions()) {
    const std::string group(OptionGroupTitle(spec.group));
    ASSERT_TRUE(sections.contains(group)) << "no heading '" << group << ":' in --help, for " << spec.name;
    const std::string entry = EntryOf(sections.at(group), FlagOf(spec));
    ASSERT_FALSE(entry.empty()) << spec.name << " is not under '" << group << ":' in --help";
    EXPECT_THAT(entry, HasSubstr(std::string(spec.help))) << spec.name;
    if (!spec.default_value.empty()) {
      EXPECT_THAT(entry, HasSubstr("(default " + std::string(spec.default_value) + ")")) << spec.name;
    }
    if (!spec.value_name.empty()) {
      EXPECT_THAT(entry, HasSubstr(FlagOf(spec) + " " + std::string(spec.value_name)));
    }
    if (!spec.alias.empty()) {
      EXPECT_THAT(entry, HasSubstr(std::string(spec.alias) + ", " + FlagOf(spec)));
    }
  }
}

// "" (the command itself) and the name of every subcommand.
std::vector<std::string> Commands() {
  CommandLine line;
  std::unique_ptr<CLI::App> app = MakeCommandLine(line);
  std::vector<std::string> names = {""};
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

TEST(HelpTest, EveryLineFitsIn100Columns) {
  ASSERT_GE(Commands().size(), 5u);
  for (const std::string& subcommand : Commands()) {
    for (const std::string& line : Lines(HelpOf(subcommand))) {
      EXPECT_LE(line.size(), kHelpWidth) << "tensorfs " << subcommand << " --help: " << line;
    }
  }
}

TEST(HelpTest, EndsWithTheExitStatuses) {
  const std::vector<std::string> lines = Lines(HelpOf(""));
  ASSERT_GE(lines.size(), 7u);
  EXPECT_EQ(lines[lines.size() - 7], "Exit status:");
  for (int status = 0; status <= 5; ++status) {
    EXPECT_TRUE(lines[lines.size() - 6 + status].starts_with("  " + std::to_string(status) + " "))
        << lines[lines.size() - 6 + status];
  }
}

TEST(HelpTest, PointsToTheConfigurationPage) {
  EXPECT_THAT(HelpOf(""), HasSubstr("docs/CONFIGURATION.md"));
}

TEST(HelpTest, SubcommandsListTheirOptionsAndExitStatuses) {
  const std::map<std::string, std::vector<std::string>> want = {
      {"inspect", {"--json", "-o OPTIONS", "--layer-regex REGEX"}},
      {"stats", {"--json"}},
      {"handoff", {"--wait SECONDS"}},
      {"gke-sidecar", {"--tmp-dir DIR"}},
  };
  for (const std::string& subcommand : Commands()) {
    EXPECT_TRUE(subcommand.empty() || want.contains(subcommand)) << "a subcommand this test does not know: "
                                                                 << subcommand;
  }
  for (const auto& [subcommand, flags] : want) {
    const std::string help = HelpOf(subcommand);
    EXPECT_TRUE(help.starts_with("Usage: tensorfs " + subcommand + " ")) << help;
    for (const std::string& flag : flags) EXPECT_THAT(help, HasSubstr("  " + flag)) << subcommand;
    EXPECT_THAT(help, HasSubstr("\nExit status:\n  0 ")) << subcommand;
  }
}

TEST(HelpTest, BinaryPrintsTheRenderedHelp) {
  auto result = RunCommand(TensorfsBinary() + " --help");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.output, HelpOf(""));
  auto inspect = RunCommand(TensorfsBinary() + " inspect --help");
  EXPECT_EQ(inspect.exit_code, 0);
  EXPECT_EQ(inspect.output, HelpOf("inspect"));
}

TEST(VersionTest, PrintsTheProjectVersion) {
  auto result = RunCommand(TensorfsBinary() + " --version");
  EXPECT_EQ(result.exit_code, 0);
  // "tensorfs 0.1.0" and, built from a checkout, " (git DESCRIBE)".
  EXPECT_THAT(result.output, ::testing::MatchesRegex("tensorfs " TENSORFS_PROJECT_VERSION "( \\(git [^)]+\\))?\n"));
}

// The man page the build generated (fs/CMakeLists.txt), as the package installs it.
std::string ManPage() { return ReadWhole(TENSORFS_MAN_PAGE); }

TEST(ManPageTest, ListsEveryOptionInBothForms) {
  const std::string page = ManPage();
  ASSERT_FALSE(page.empty()) << "cannot read " << TENSORFS_MAN_PAGE;
  EXPECT_THAT(page, HasSubstr(".TH TENSORFS 8 \"\" \"tensorfs " TENSORFS_PROJECT_VERSION "\""));
  for (const OptionSpec& spec : AllMountOptions()) {
    std::string flag = FlagOf(spec);
    std::string roff_flag;
    for (char c : flag) roff_flag += c == '-' ? std::string("\\-") : std::string(1, c);
    EXPECT_THAT(page, HasSubstr("\\fB" + roff_flag + "\\fR")) << spec.name;
    std::string o_name;
    for (char c : spec.name) o_name += c == '-' ? std::string("\\-") : std::string(1, c);
    EXPECT_THAT(page, HasSubstr("\\fB\\-o " + o_name)) << spec.name;
  }
  for (const char* section : {".SH SYNOPSIS", ".SH OPTIONS", ".SH COMMANDS", ".SH EXIT STATUS", ".SH ENVIRONMENT"}) {
    EXPECT_THAT(page, HasSubstr(section));
  }
}

TEST(ManPageTest, RendersWithoutWarnings) {
  auto result = RunCommand("MANWIDTH=100 man --warnings -l " TENSORFS_MAN_PAGE " 2>&1 >/dev/null");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "") << "man --warnings -l " TENSORFS_MAN_PAGE;
  auto text = RunCommand("MANWIDTH=100 man -l " TENSORFS_MAN_PAGE " 2>/dev/null | col -b");
  EXPECT_THAT(text.output, HasSubstr("--cache-size SIZE, -o cache_size=SIZE"));
}

// docs/CONFIGURATION.md: each option is an entry "- **`name=VALUE`** ..." (or
// "- **`name`**" for a flag) under the "## " heading of its group.
struct DocEntry {
  std::string section;
  std::string form;  // "cache_size=SIZE"
  int line;
};
std::multimap<std::string, DocEntry> ConfigurationEntries() {
  std::multimap<std::string, DocEntry> entries;
  const std::string path = std::string(TENSORFS_SOURCE_DIR) + "/docs/CONFIGURATION.md";
  const std::vector<std::string> lines = Lines(ReadWhole(path));
  const std::regex entry(R"(^- \*\*`([a-z_0-9]+)(=[^`]*)?`\*\*)");
  std::string section;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].starts_with("## ")) section = lines[i].substr(3);
    std::smatch m;
    if (std::regex_search(lines[i], m, entry)) {
      entries.emplace(m[1].str(), DocEntry{section, m[1].str() + m[2].str(), static_cast<int>(i + 1)});
    }
  }
  return entries;
}

TEST(ConfigurationDocTest, ListsEveryOptionOnceUnderItsGroup) {
  const auto entries = ConfigurationEntries();
  ASSERT_FALSE(entries.empty()) << "no option entries in docs/CONFIGURATION.md";
  for (const OptionSpec& spec : AllMountOptions()) {
    const std::string name(spec.name);
    ASSERT_EQ(entries.count(name), 1u) << "docs/CONFIGURATION.md needs exactly one entry \"- **`" << name
                                       << (spec.value_name.empty() ? "" : "=" + std::string(spec.value_name))
                                       << "`**\" for option " << name;
    const DocEntry& doc = entries.find(name)->second;
    EXPECT_EQ(doc.section, OptionGroupTitle(spec.group))
        << "docs/CONFIGURATION.md:" << doc.line << ": " << name << " belongs under \"## "
        << OptionGroupTitle(spec.group) << "\"";
    const std::string form = spec.value_name.empty() ? name : name + "=" + std::string(spec.value_name);
    EXPECT_EQ(doc.form, form) << "docs/CONFIGURATION.md:" << doc.line;
  }
}

// Every flag that `tensorfs --help` and each command's --help print, read
// from the binary's own output: the flags of the option table, whose -o item
// must be an entry of the page, and the others (--print-mount-params,
// --version, a command's --json ...), which the page must name as `--flag`.
TEST(ConfigurationDocTest, NamesEveryFlagTheHelpPrints) {
  const std::string doc = ReadWhole(std::string(TENSORFS_SOURCE_DIR) + "/docs/CONFIGURATION.md");
  const auto entries = ConfigurationEntries();
  const CommandResult top = RunCommand(TensorfsBinary() + " --help");
  ASSERT_EQ(top.exit_code, 0) << top.output;
  // The commands, from the usage lines ("  tensorfs inspect SOURCE ...").
  std::vector<std::string> helps = {""};
  const std::regex command_line(R"(^  tensorfs ([a-z][a-z0-9-]+) )");
  for (const std::string& line : Lines(top.output)) {
    std::smatch m;
    if (std::regex_search(line, m, command_line) && m[1].str() != "COMMAND") helps.push_back(m[1].str());
  }
  ASSERT_GT(helps.size(), 3u) << "no commands in the usage of --help:\n" << top.output;
  const std::regex flag(R"((^|[ ,])(--?[a-zA-Z][a-zA-Z0-9-]*))");
  size_t seen = 0;
  for (const std::string& command : helps) {
    const CommandResult help = RunCommand(TensorfsBinary() + " " + command + " --help");
    ASSERT_EQ(help.exit_code, 0) << command << ": " << help.output;
    for (const std::string& line : Lines(help.output)) {
      if (!line.starts_with("  -")) continue;
      const std::string names = line.substr(0, line.find("  ", 2));
      for (std::sregex_iterator it(names.begin(), names.end(), flag), end; it != end; ++it) {
        const std::string name = (*it)[2].str();
        if (name.size() == 2 && name != "-o") continue;  // -h, -d, -f: their long forms are named
        ++seen;
        std::string item = name.substr(2);
        std::replace(item.begin(), item.end(), '-', '_');
        const bool an_entry = name.starts_with("--") && entries.count(item) == 1;
        EXPECT_TRUE(an_entry || doc.find("`" + name) != std::string::npos)
            << "docs/CONFIGURATION.md does not name " << name << ", which `tensorfs "
            << (command.empty() ? "" : command + " ") << "--help` prints: add `" << name
            << "` under \"## Commands and their flags\"";
      }
    }
  }
  EXPECT_GT(seen, 40u) << "too few flags read from --help";
}

TEST(ConfigurationDocTest, DocumentsNoOptionTensorfsLacks) {
  for (const auto& [name, doc] : ConfigurationEntries()) {
    bool known = false;
    for (const OptionSpec& spec : AllMountOptions()) known = known || spec.name == name;
    EXPECT_TRUE(known) << "docs/CONFIGURATION.md:" << doc.line << " documents '" << name
                       << "', which is not in the option table (core/options/mount_options.cc)";
  }
}

}  // namespace
}  // namespace tensorfs
