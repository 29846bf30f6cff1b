// Runs the PopART ops of popops_ext/poplar on the host graph: builds the
// op's graph once per attribute set and input shapes (cached), writes the
// inputs, runs, reads the outputs.
#pragma once

#include <poplar/Engine.hpp>
#include <poplar/Graph.hpp>
#include <poplar/Program.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace snn {
namespace hostgraph {

using Attributes = std::map<std::string, double>;

struct HostArray {
  poplar::Type type;
  std::vector<std::size_t> shape;
  std::vector<std::uint8_t> data;
  // An input left unconnected, as PopART leaves a grad op's optional input (the
  // gradient of an output off the loss path): the op sees an invalid Tensor.
  bool absent = false;
};

// The element type and shape of each forward input: what a grad op's
// outputs are the gradients of (empty for a forward op).
using ForwardSpecs = std::vector<std::pair<poplar::Type, std::vector<std::size_t>>>;

// Grows one of the ops of popops_ext/poplar/OpSignatures.hpp (a forward op or
// its grad op) through popops_ext/poplar/LayerOps, as the op's Opx does, under
// the debug name `name`; inputs and outputs in the table's order.
std::vector<poplar::Tensor> growOp(const std::string &op, poplar::Graph &graph,
                                   poplar::program::Sequence &prog, const Attributes &attributes,
                                   const std::vector<poplar::Tensor> &inputs,
                                   const ForwardSpecs &forwardInputs = {},
                                   const std::string &name = "");

// An input of a forward op laid out as PopART lays out one that no other op laid
// out: by the op where its Opx can create it (SnnLayerOpx::createInput, through
// LayerOps' createInput: the weights), else spread over the tiles. `inputs`: the
// element type and shape of each of the op's inputs, in the table's order.
poplar::Tensor createOpInput(const std::string &op, poplar::Graph &graph,
                             const Attributes &attributes, const ForwardSpecs &inputs, int index,
                             const std::string &name = "");

// A pipelined stack of the ops' layers grown as one program, the fused time
// loop (popops_ext/poplar/NetworkOps.hpp): ops[l] names layer l's forward op
// (SnnSpikingLayer / SnnReadoutLayer); `grad` grows the network's backward, whose
// inputs per layer are its grad op's, and `forwardInputs` per layer the forward
// op's input specs. A layer after the first leaves its list inputs absent.
struct NetworkCall {
  std::vector<std::string> ops;
  std::vector<Attributes> attributes;
  bool grad = false;
  std::vector<std::vector<HostArray>> inputs;
  std::vector<ForwardSpecs> forwardInputs;
};

// Grows NetworkCall's program on `graph` from the given per-layer input tensors.
std::vector<std::vector<poplar::Tensor>>
growNetwork(const NetworkCall &call, poplar::Graph &graph, poplar::program::Sequence &prog,
            const std::vector<std::vector<poplar::Tensor>> &inputs, const std::string &name = "");

// The input specs of a network's layers' forward ops (listed: its layers' own
// inputs' specs, with a layer after the first's list inputs as the layer before
// emits them), in the table's order.
std::vector<ForwardSpecs> networkInputSpecs(const NetworkCall &call);

class OpRunner {
public:
  explicit OpRunner(bool checkOutputReads) : checkOutputReads_(checkOutputReads) {}
  std::vector<HostArray> run(const std::string &op, const Attributes &attributes,
                             const std::vector<HostArray> &inputs,
                             const ForwardSpecs &forwardInputs = {});
  std::vector<std::vector<HostArray>> runNetwork(const NetworkCall &call);

private:
  struct Built {
    std::unique_ptr<poplar::Graph> graph;
    std::unique_ptr<poplar::Engine> engine;
    std::vector<poplar::Tensor> outputs;
  };
  Built &built(const std::string &op, const Attributes &attributes,
               const std::vector<HostArray> &inputs, const ForwardSpecs &forwardInputs);
  bool checkOutputReads_;
  struct BuiltNetwork {
    std::unique_ptr<poplar::Graph> graph;
    std::unique_ptr<poplar::Engine> engine;
    std::vector<std::vector<poplar::Tensor>> outputs;
  };
  std::map<std::string, Built> cache_;
  std::map<std::string, BuiltNetwork> networks_; // a few: tests, one network at a time
  std::vector<std::string> order_; // least recently built first
};

} // namespace hostgraph
} // namespace snn
