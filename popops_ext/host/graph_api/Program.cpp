// Program handles: nodes of the tree an Engine runs.
#include <poplar/Program.hpp>
#include <poplar/exceptions.hpp>

#include "Model.hpp"

namespace poplar {
namespace program {

using snn::hostgraph::ProgramNode;

namespace {
std::shared_ptr<ProgramNode> node(ProgramNode::Kind kind, const DebugContext &dc) {
  auto n = std::make_shared<ProgramNode>();
  n->kind = kind;
  n->name = dc.getPathName();
  return n;
}
} // namespace

Program::Program() : node_(node(ProgramNode::Kind::Sequence, {})) {}

bool Program::isEmpty() const {
  return node_->kind == ProgramNode::Kind::Sequence && node_->children.empty();
}

Sequence::Sequence(const DebugContext &debugContext)
    : Program(node(ProgramNode::Kind::Sequence, debugContext)) {}

Sequence::Sequence(std::initializer_list<Program> programs, const DebugContext &debugContext)
    : Sequence(debugContext) {
  for (const Program &p : programs)
    add(p);
}

void Sequence::add(const Program &p) { node_->children.push_back(p); }

Execute::Execute(ComputeSet cs, const DebugContext &debugContext)
    : Program(node(ProgramNode::Kind::Execute, debugContext)) {
  node_->computeSet = cs.getId();
}

Repeat::Repeat(unsigned count, const Program &prog, const DebugContext &debugContext)
    : Program(node(ProgramNode::Kind::Repeat, debugContext)) {
  node_->count = count;
  node_->children.push_back(prog);
}

Copy::Copy(const Tensor &src, const Tensor &dst, bool, const DebugContext &debugContext)
    : Program(node(ProgramNode::Kind::Copy, debugContext)) {
  if (!src.valid() || !dst.valid())
    throw poplar_error("Copy '" + debugContext.getPathName() + "' of an invalid tensor");
  if (src.elementType() != dst.elementType() || src.numElements() != dst.numElements()) {
    const auto *g = src.hostView().graph;
    throw poplar_error("Copy '" + debugContext.getPathName() + "' from " + g->describe(src) +
                       " (" + std::to_string(src.numElements()) + " x " +
                       src.elementType().toString() + ") to " + g->describe(dst) + " (" +
                       std::to_string(dst.numElements()) + " x " +
                       dst.elementType().toString() +
                       "): a copy needs the same number of elements of the same type");
  }
  node_->src = src;
  node_->dst = dst;
}

} // namespace program
} // namespace poplar
