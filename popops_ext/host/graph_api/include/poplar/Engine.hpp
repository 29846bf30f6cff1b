// Host implementation of poplar/Engine.hpp. Building an Engine compiles the
// graph as the SDK would refuse to: every used tensor mapped, every vertex
// mapped and fully connected, no vertex touching a region mapped to another
// tile (the host demands exchange as explicit Copy programs, see
// docs/ipu.md), no two vertices of a compute set writing (or one writing and
// another reading) the same element, and every tile within its memory. run()
// then executes the program on the host: vertices by calling the codelet's
// compute() (compute(workerId) for each worker of a MultiVertex).
//
// Options: "debug.checkOutputReads" ("true" by default): run every vertex
// twice with its Output fields filled with two different patterns, and throw
// if anything it writes differs (it read an Output before writing it).
#pragma once

#include <memory>
#include <string>

#include <poplar/Graph.hpp>
#include <poplar/OptionFlags.hpp>
#include <poplar/Program.hpp>
#include <poplar/StringRef.hpp>

namespace snn {
namespace hostgraph {
class Executor;
} // namespace hostgraph
} // namespace snn

namespace poplar {

class Engine {
public:
  Engine(const Graph &graph, const program::Program &prog, const OptionFlags &options = {});
  Engine(Engine &&) noexcept;
  ~Engine();

  void run(unsigned prog = 0, const std::string &debugName = "");
  void writeTensor(StringRef handle, const void *buf, const void *bufEnd);
  void readTensor(StringRef handle, void *buf, void *bufEnd);

private:
  std::unique_ptr<snn::hostgraph::Executor> executor_;
};

} // namespace poplar
