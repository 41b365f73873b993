// Node-local data (daemon/controller/data_plan.h, daemon/protocol/shard_list.h): every file the
// nodes hold goes to exactly one holder, balanced by examples; a node left without data, or
// files of two exports, are refused naming them; a node's list is checked field by field.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>

#include "daemon/controller/data_plan.h"

namespace dtrain {
namespace {

daemon::ShardFile file(const std::string& node, int k, int64_t examples = 100,
                       uint32_t export_id = 7) {
  return {"/data/" + node + "/train-0000" + std::to_string(k) + ".dtb", examples, 700, export_id};
}

std::vector<daemon::ShardFile> files(const std::string& node, std::vector<int> ks) {
  std::vector<daemon::ShardFile> out;
  for (int k : ks) out.push_back(file(node, k));
  return out;
}

}  // namespace

TEST_CASE("each file goes to one of its holders, the examples balanced over the nodes") {
  const std::vector<std::string> members = {"node-1", "node-2", "node-3"};
  // node-1 holds files 0-3, node-2 a copy of 3 and file 4, node-3 files 5-6 and a copy of 0.
  const daemon::DataPlan plan = daemon::make_data_plan(
      members, {{"node-1", files("node-1", {0, 1, 2, 3})},
                {"node-2", files("node-2", {3, 4})},
                {"node-3", files("node-3", {5, 6, 0})}});
  REQUIRE(plan.error.empty());
  std::multiset<std::string> given;
  for (const auto& [node, paths] : plan.files)
    for (const std::string& p : paths) {
      CHECK(p.find("/data/" + node + "/") == 0);  // its own path
      given.insert(std::filesystem::path(p).filename().string());
    }
  CHECK(given.size() == 7);
  CHECK(std::set<std::string>(given.begin(), given.end()).size() == 7);  // each once
  int64_t sum = 0;
  for (int64_t n : plan.member_examples) {
    CHECK(n >= 200);  // 700 over three: none starved
    CHECK(n <= 300);
    sum += n;
  }
  CHECK(sum == 700);
  CHECK(plan.summary.find("7 files, 700 of the export's 700 examples") != std::string::npos);
  // What a node is sent, and the same from the plan as the job record keeps it.
  const daemon::DataPlanMessage m = plan.message_for("node-2");
  CHECK(m.files == plan.files.at("node-2"));
  CHECK(m.member_examples == plan.member_examples);
  const daemon::DataPlanMessage kept = daemon::plan_message_for(daemon::data_plan_json(plan), "node-2");
  CHECK(kept.files == m.files);
  CHECK(kept.member_examples == m.member_examples);
}

TEST_CASE("a plan the nodes' files cannot make is refused, naming the node or the files") {
  const std::vector<std::string> members = {"node-1", "node-2"};
  SECTION("a node that holds nothing") {
    const auto plan = daemon::make_data_plan(members, {{"node-1", files("node-1", {0, 1})},
                                               {"node-2", {}}});
    CHECK(plan.error == "node-2 holds none of the files data.train.shards matches: its workers "
                        "would have no data");
    CHECK(plan.files.empty());
  }
  SECTION("a node that holds only a copy of a file another trains from") {
    const auto plan = daemon::make_data_plan(members, {{"node-1", files("node-1", {0})},
                                               {"node-2", files("node-2", {0})}});
    CHECK(plan.error.find("only copies of files other nodes train from") != std::string::npos);
  }
  SECTION("files of two exports") {
    const auto plan = daemon::make_data_plan(
        members, {{"node-1", files("node-1", {0})}, {"node-2", {file("node-2", 1, 100, 8)}}});
    CHECK(plan.error == "node-2's /data/node-2/train-00001.dtb is from another export than "
                        "node-1's /data/node-1/train-00000.dtb");
  }
  SECTION("more examples than the export has: two exports of the same data, or renamed files") {
    const auto plan = daemon::make_data_plan(
        members, {{"node-1", files("node-1", {0, 1, 2, 3, 4})}, {"node-2", files("node-2", {5, 6, 7})}});
    CHECK(plan.error.find("the files hold 800 examples, more than their export's 700") == 0);
  }
  SECTION("no files anywhere") {
    const auto plan = daemon::make_data_plan(members, {{"node-1", {}}, {"node-2", {}}});
    CHECK(plan.error == "no node holds a file that the pattern matches");
  }
  SECTION("a node lost before it listed its files gets none, and the plan is made") {
    const auto plan = daemon::make_data_plan(members, {{"node-1", files("node-1", {0, 1})}});
    CHECK(plan.error.empty());
    CHECK(plan.member_examples == std::vector<int64_t>{200, 0});
    CHECK(plan.summary.find("the nodes lack 500 examples of the export") != std::string::npos);
  }
}

TEST_CASE("a node's list of its files is read field by field") {
  const daemon::Json good = daemon::shard_list_json(files("node-1", {0, 1}));
  std::vector<daemon::ShardFile> out;
  std::string error;
  REQUIRE(daemon::read_shard_list(good, out, error));
  REQUIRE(out.size() == 2);
  CHECK(out[1].path == "/data/node-1/train-00001.dtb");
  CHECK(out[1].examples == 100);
  CHECK(out[1].total == 700);
  CHECK(out[1].export_id == 7);
  for (const char* bad : {R"({})", R"({"files": 3})",
                          R"({"files": [{"path": "/a.dtb", "examples": 1, "total": 2}]})",
                          R"({"files": [{"path": "/a.dtb", "examples": -1, "total": 2, "export": 1}]})",
                          R"({"files": [{"path": "/a.dtb", "examples": 1, "total": 2, "export": 5000000000}]})",
                          R"({"files": [{"path": "", "examples": 1, "total": 2, "export": 1}]})",
                          R"({"files": [{"path": 4, "examples": 1, "total": 2, "export": 1}]})"}) {
    INFO(bad);
    std::vector<daemon::ShardFile> none;
    CHECK_FALSE(daemon::read_shard_list(daemon::Json::parse(bad), none, error));
    CHECK_FALSE(error.empty());
  }
}


TEST_CASE("every node that holds a file gets one when some deal can feed them all") {
  // y holds only copies (a, b) that w and z hold too; q holds the big c with w and z. Dealing
  // the small files first left y nothing (q took c); the matching gives each node a file.
  auto at = [](const std::string& node, const std::string& name, int64_t examples) {
    return daemon::ShardFile{"/d/" + node + "/" + name + ".dtb", examples, 71, 5};
  };
  const std::vector<std::string> members = {"w", "z", "y", "q"};
  const daemon::DataPlan plan = daemon::make_data_plan(
      members, {{"w", {at("w", "a", 10), at("w", "c", 50)}},
                {"z", {at("z", "b", 10), at("z", "c", 50)}},
                {"y", {at("y", "a", 10), at("y", "b", 10)}},
                {"q", {at("q", "c", 50), at("q", "q", 1)}}});
  REQUIRE(plan.error.empty());
  int64_t sum = 0;
  for (int64_t n : plan.member_examples) {
    CHECK(n > 0);
    sum += n;
  }
  CHECK(sum == 71);
}

TEST_CASE("equal files spread evenly when that takes a chain of moves") {
  // Six files of 10000: node-1 holds 0-2, node-2 2-4, node-3 5 and a copy of 0 (the manual
  // ResNet-20 run's layout). The first deal gave 10000/30000/20000; even is 20000 each, which
  // needs node-1's file 0 to go to node-3 so that node-2's file 2 can go to node-1.
  auto held = [](const std::string& node, std::vector<int> ks) {
    std::vector<daemon::ShardFile> out;
    for (int k : ks)
      out.push_back({"/d/" + node + "/train-0000" + std::to_string(k) + ".dtb", 10000, 60000, 3});
    return out;
  };
  for (const std::vector<std::string>& members :
       {std::vector<std::string>{"node-3", "node-2", "node-1"},
        std::vector<std::string>{"node-1", "node-2", "node-3"}}) {
    const daemon::DataPlan plan = daemon::make_data_plan(
        members, {{"node-1", held("node-1", {0, 1, 2})},
                  {"node-2", held("node-2", {2, 3, 4})},
                  {"node-3", held("node-3", {5, 0})}});
    REQUIRE(plan.error.empty());
    CHECK(plan.member_examples == std::vector<int64_t>{20000, 20000, 20000});
  }
}

TEST_CASE("a node-local evaluation makes each distinct file one part, held by one holder") {
  const std::vector<std::string> members = {"node-1", "node-2", "node-3"};
  // The same holdings as above: 7 distinct files, copies of 0 and 3.
  const std::map<std::string, std::vector<daemon::ShardFile>> lists = {
      {"node-1", files("node-1", {0, 1, 2, 3})},
      {"node-2", files("node-2", {3, 4})},
      {"node-3", files("node-3", {5, 6, 0})}};
  const daemon::TaskPartPlan plan = daemon::make_task_parts(members, lists);
  REQUIRE(plan.error.empty());
  REQUIRE(plan.owner.size() == 7);
  std::map<std::string, int64_t> load;
  for (size_t p = 0; p < plan.owner.size(); ++p) {
    // Parts in name order; the owner holds the file, and every holder's path is known.
    const std::string name = "train-0000" + std::to_string(p) + ".dtb";
    REQUIRE(plan.holders[p].count(plan.owner[p]));
    for (const auto& [node, path] : plan.holders[p])
      CHECK(path == "/data/" + node + "/" + name);
    load[plan.owner[p]] += plan.examples[p];
  }
  CHECK(plan.holders[0].size() == 2);  // file 0: node-1 and node-3
  CHECK(plan.holders[3].size() == 2);  // file 3: node-1 and node-2
  for (const auto& [node, examples] : load) CHECK((examples >= 200 && examples <= 300));
  CHECK(plan.summary.find("7 files, 700 examples") != std::string::npos);

  // An evaluation must see every example: a missing file is refused with the count.
  const daemon::TaskPartPlan missing = daemon::make_task_parts(
      members, {{"node-1", files("node-1", {0, 1, 2, 3})}, {"node-2", files("node-2", {4})}});
  CHECK(missing.error == "the nodes hold 500 of the export's 700 examples");
  CHECK(missing.fix.find("copy the missing files") != std::string::npos);
  // Files of another export are refused as for training.
  auto other = files("node-2", {4, 5, 6});
  other[0].export_id = 8;
  CHECK(daemon::make_task_parts(members, {{"node-1", files("node-1", {0, 1, 2, 3})},
                                          {"node-2", other}})
            .error.find("is from another export") != std::string::npos);
}

}  // namespace dtrain
