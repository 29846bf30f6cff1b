// Compiles a host graph and its program for execution, checking the rules
// the device would enforce (see poplar/Engine.hpp), then runs it.
#pragma once

#include "Model.hpp"

#include <poplar/OptionFlags.hpp>
#include <poplar/Program.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace snn {
namespace hostgraph {

class Executor {
public:
  Executor(const GraphModel &graph, const poplar::program::Program &prog,
           const poplar::OptionFlags &options);
  ~Executor();

  void run();
  void writeTensor(const std::string &handle, const void *buf, const void *bufEnd);
  void readTensor(const std::string &handle, void *buf, void *bufEnd);

  // For host operations.
  const GraphModel &graph() const { return graph_; }
  std::uint8_t *at(const Chunk &c) { return memory_[c.var].get() + c.begin; }
  void gather(const std::vector<Chunk> &chunks, void *out);
  void scatter(const std::vector<Chunk> &chunks, const void *in);
  void gather(const poplar::Tensor &t, void *out) { gather(chunksOf(t), out); }
  void scatter(const poplar::Tensor &t, const void *in) { scatter(chunksOf(t), in); }

  // Times each vertex ran (all of a compute set's vertices run each time it does).
  std::uint64_t vertexRuns() const { return vertexRuns_; }

private:
  struct Binding;
  struct BoundVertex;
  struct Step;

  void collect(const ProgramNode &node);
  void checkMapped();
  void checkVertices(unsigned cs);
  void checkRaces(unsigned cs);
  void checkMemory();
  void allocate();
  void bindComputeSet(unsigned cs);
  std::unique_ptr<Step> compile(const ProgramNode &node);
  void execute(const Step &step);
  void runVertex(BoundVertex &v);
  void runVertexChecked(BoundVertex &v);

  const GraphModel &graph_;
  std::shared_ptr<ProgramNode> root_;
  bool checkOutputReads_ = true;
  std::vector<bool> usedVars_, usedComputeSets_;
  std::vector<std::shared_ptr<HostOp>> hostOps_;
  std::vector<const ProgramNode *> copies_;
  std::vector<std::unique_ptr<std::uint8_t, void (*)(void *)>> memory_;
  std::vector<std::vector<BoundVertex>> bound_;
  std::unique_ptr<Step> program_;
  std::uint64_t vertexRuns_ = 0;
};

} // namespace hostgraph
} // namespace snn
