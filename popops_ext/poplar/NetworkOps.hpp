// A pipelined stack of layers grown as one program: the fused time loop.
//
// With pipelining (snn_ipu.pipeline: every layer after the first has
// input_delay = 1) layer l at step t reads layer l-1's list of step t-1, so
// the layers of a step do not depend on each other. Grown as one op each
// (LayerOps.hpp), every layer has its own Repeat and the layers run one after
// another; here one Repeat over T runs them all: each phase of a step
// (LayerGraph's builders) is one compute set holding every layer's vertices,
// so on disjoint tiles (the pipelined placement) the layers' phases share
// their supersteps and syncs. Backward runs time in reverse: layer l at step t
// adds layer l+1's input gradient of step t+1 (still in l+1's step variable)
// to the gradient of its own list.
//
// Inputs and outputs are the layers' ops' (OpSignatures.hpp), layer by layer,
// as if each layer were its own op with its input list delayed by one step;
// a layer after the first reads no list inputs of its own (they may be
// invalid tensors), and its outputs' gradients from outside the network (the
// GradOut entries of its grad inputs) add to what the layer after it sends.
#pragma once

#include <poplar/DebugContext.hpp>
#include <poplar/Graph.hpp>
#include <poplar/Program.hpp>
#include <poplar/Tensor.hpp>

#include <vector>

#include "LayerOps.hpp"

namespace snn {
namespace ipu {

struct NetworkLayer {
  OpKind kind = OpKind::Spiking;
  LayerAttributes attributes;
};

// inputs[l]: layer l's op inputs in signature order. Returns layer l's op outputs.
std::vector<std::vector<poplar::Tensor>>
growNetworkForward(poplar::Graph &graph, poplar::program::Sequence &prog,
                   const std::vector<NetworkLayer> &layers,
                   const std::vector<std::vector<poplar::Tensor>> &inputs,
                   const poplar::DebugContext &dc);

// gradInputs[l]: layer l's grad-op inputs in signature order (a layer after
// the first may leave in_ids and in_counts invalid: they are the layer
// before's ids and counts outputs, delayed); outputs[l]: the specs of layer l's
// grad outputs (gradOutputSpecs). Returns layer l's grad-op outputs; a layer
// after the first's in_values gradient is the one the layer before received.
std::vector<std::vector<poplar::Tensor>>
growNetworkBackward(poplar::Graph &graph, poplar::program::Sequence &prog,
                    const std::vector<NetworkLayer> &layers,
                    const std::vector<std::vector<poplar::Tensor>> &gradInputs,
                    const std::vector<std::vector<TensorSpec>> &outputs,
                    const poplar::DebugContext &dc);

} // namespace ipu
} // namespace snn
