// Host implementation of poplar/Program.hpp: the control programs. A program
// is a handle to a node of a program tree that an Engine runs in order.
#pragma once

#include <initializer_list>
#include <memory>

#include <poplar/DebugContext.hpp>
#include <poplar/GraphElements.hpp>
#include <poplar/Tensor.hpp>

namespace snn {
namespace hostgraph {
struct ProgramNode;
} // namespace hostgraph
} // namespace snn

namespace poplar {
namespace program {

class Program {
public:
  Program();
  bool isEmpty() const;

  // Not part of the SDK's interface: the node behind the handle.
  const std::shared_ptr<snn::hostgraph::ProgramNode> &hostNode() const { return node_; }
  explicit Program(std::shared_ptr<snn::hostgraph::ProgramNode> node) : node_(std::move(node)) {}

protected:
  std::shared_ptr<snn::hostgraph::ProgramNode> node_;
};

class Sequence : public Program {
public:
  Sequence(const DebugContext &debugContext = {});
  Sequence(std::initializer_list<Program> programs, const DebugContext &debugContext = {});
  void add(const Program &p);
};

class Execute : public Program {
public:
  explicit Execute(ComputeSet cs, const DebugContext &debugContext = {});
};

class Repeat : public Program {
public:
  Repeat(unsigned count, const Program &prog, const DebugContext &debugContext = {});
};

class Copy : public Program {
public:
  Copy(const Tensor &src, const Tensor &dst, bool dontOutline = false,
       const DebugContext &debugContext = {});
};

} // namespace program
} // namespace poplar
