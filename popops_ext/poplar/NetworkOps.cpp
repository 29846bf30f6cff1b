#include "NetworkOps.hpp"

#include <popops/ElementWise.hpp>
#include <popops/Zero.hpp>
#include <poputil/TileMapping.hpp>

#include <algorithm>
#include <stdexcept>

namespace snn {
namespace ipu {

using namespace poplar;
using namespace poplar::program;

namespace {

[[noreturn]] void fail(const std::string &what) {
  throw std::invalid_argument("snn_ipu network: " + what);
}

void checkLayers(const std::vector<NetworkLayer> &layers, std::size_t numInputs) {
  if (layers.empty())
    fail("no layers");
  if (numInputs != layers.size())
    fail(std::to_string(layers.size()) + " layers but inputs for " + std::to_string(numInputs));
  for (std::size_t l = 0; l + 1 < layers.size(); ++l)
    if (layers[l].kind != OpKind::Spiking)
      fail("layer " + std::to_string(l) + " is a readout, which lists no spikes for the layer " +
           "after it: only the last layer may be one");
}

// The list a layer emits: [T, B, K], K its capacity (held to its N, as LayerOps' outputShapes).
Shape listShapeOf(const NetworkLayer &layer, const Shape &inList, const Tensor &weight) {
  return outputShapes(layer.kind, layer.attributes, inList, weight.shape())[ops::spiking::kIds];
}

// x[t - 1] at step t, nothing at step 0: the list as a layer with input_delay = 1 sees it.
Tensor delayed(Graph &graph, const Tensor &x, const DebugNameAndId &dnai, const std::string &name) {
  std::vector<std::size_t> shape = x.shape();
  shape[0] = 1;
  Tensor z = graph.addConstant(x.elementType(), shape, 0, {dnai, name + "[-1]"});
  poputil::mapTensorLinearly(graph, z);
  return x.dim(0) == 1 ? z : concat(z, x.slice(0, x.dim(0) - 1, 0), 0);
}

// One compute set of a step, holding the vertices `add` gives it.
template <typename Add>
void phase(Graph &graph, Sequence &body, const DebugNameAndId &dnai, const std::string &name,
           Add &&add) {
  ComputeSet cs = graph.addComputeSet({dnai, name});
  add(cs);
  body.add(Execute(cs, {dnai, name}));
}

// An exchange of every layer: their popops operations (step slices, zeroing)
// first, then all their Copy programs back to back, one exchange phase.
template <typename Add> void exchange(Sequence &body, Add &&add) {
  Sequence ops, copies;
  add(ops, copies);
  body.add(ops);
  body.add(copies);
}

Tensor counter(Graph &graph, unsigned tile, const DebugNameAndId &dnai, const std::string &name,
               unsigned value) {
  Tensor c = graph.addConstant(UNSIGNED_INT, {1}, value, {dnai, name});
  graph.setTileMapping(c, tile);
  return c;
}

} // namespace

std::vector<std::vector<Tensor>> growNetworkForward(Graph &graph, Sequence &prog,
                                                    const std::vector<NetworkLayer> &layers,
                                                    const std::vector<std::vector<Tensor>> &inputs,
                                                    const DebugContext &dc) {
  checkLayers(layers, inputs.size());
  DebugInfo info(dc, "snn_ipu");
  const DebugNameAndId dnai(info, "SnnNetwork");
  const std::size_t n = layers.size();
  using namespace ops::spiking; // the list inputs and outputs have the same places in both ops
  if (inputs[0].size() <= kInIds || !inputs[0][kInIds].valid() || inputs[0][kInIds].rank() != 3)
    fail("the first layer's in_ids must be a [T, B, K] tensor");
  std::vector<ForwardOp> ops;
  std::vector<Shape> lists;
  for (std::size_t l = 0; l < n; ++l) {
    const std::vector<Tensor> &in = inputs[l];
    if (in.size() <= kWeight || !in[kWeight].valid() || in[kWeight].rank() != 2)
      fail("layer " + std::to_string(l) + " has no [N, in] weight input");
    if (l > 0 && in[kWeight].dim(1) != inputs[l - 1][kWeight].dim(0))
      fail("layer " + std::to_string(l) + " takes " + std::to_string(in[kWeight].dim(1)) +
           " inputs, layer " + std::to_string(l - 1) + " has " +
           std::to_string(inputs[l - 1][kWeight].dim(0)) + " neurons");
    lists.push_back(l == 0 ? in[kInIds].shape()
                           : listShapeOf(layers[l - 1], lists[l - 1], inputs[l - 1][kWeight]));
    ops.push_back(forwardOp(graph, layers[l].kind, layers[l].attributes, in, lists[l],
                            {dnai, "layer" + std::to_string(l)}));
  }
  std::vector<ForwardLoop> loops;
  for (ForwardOp &op : ops)
    loops.push_back(op.layer.beginForward(prog, op.inputs));
  const unsigned tile0 = unsigned(layers[0].attributes.firstTile);
  Tensor t = graph.addVariable(UNSIGNED_INT, {1}, {dnai, "t"});
  graph.setTileMapping(t, tile0);
  const Tensor one = counter(graph, tile0, dnai, "one", 1);
  popops::zero(graph, t, prog, {dnai, "t=0"});

  Sequence body;
  auto each = [&](auto &&f) {
    for (std::size_t l = 0; l < n; ++l)
      f(ops[l].layer, loops[l], l);
  };
  // Layer l reads layer l-1's list of step t-1: its step variables until its combine.
  // Every layer's step slices first, then all their copies: one exchange phase.
  exchange(body, [&](Sequence &slices, Sequence &copies) {
    each([&](LayerGraph &g, ForwardLoop &L, std::size_t l) {
      if (l == 0)
        g.exchangeInput(slices, copies, L, t);
      else
        g.exchangeInput(copies, L, loops[l - 1].stepIds, loops[l - 1].stepCounts.slice(0, 2, 1));
    });
  });
  phase(graph, body, dnai, "spikeMatmul", [&](ComputeSet cs) {
    each([&](LayerGraph &g, ForwardLoop &L, std::size_t) { g.addSpikeMatmul(cs, L); });
  });
  const bool anyRecurrent =
      std::any_of(ops.begin(), ops.end(), [](const ForwardOp &op) { return op.layer.recurrent(); });
  if (anyRecurrent)
    phase(graph, body, dnai, "recurrentMatmul", [&](ComputeSet cs) {
      each([&](LayerGraph &g, ForwardLoop &L, std::size_t) {
        if (g.recurrent())
          g.addRecurrentMatmul(cs, L);
      });
    });
  phase(graph, body, dnai, "stateUpdate", [&](ComputeSet cs) {
    each([&](LayerGraph &g, ForwardLoop &L, std::size_t) { g.addNeuronUpdate(cs, L); });
  });
  each([&](LayerGraph &g, ForwardLoop &L, std::size_t) {
    if (!g.readout())
      g.exchangeTileLists(body, L);
  });
  if (layers[0].kind == OpKind::Spiking) // else a lone readout, which lists nothing
    phase(graph, body, dnai, "combine", [&](ComputeSet cs) {
      each([&](LayerGraph &g, ForwardLoop &L, std::size_t) {
        if (!g.readout()) {
          g.addListCombine(cs, L);
          g.addSpikeBits(cs, L);
        }
      });
    });
  each([&](LayerGraph &g, ForwardLoop &L, std::size_t) { g.writeStep(body, L, t); });
  popops::addInPlace(graph, t, one, body, {dnai, "t+=1"});
  prog.add(Repeat(unsigned(lists[0][0]), body, {dnai, "timeLoop"}));

  std::vector<std::vector<Tensor>> out;
  for (std::size_t l = 0; l < n; ++l) {
    const ForwardOutputs fo = ops[l].layer.endForward(prog, loops[l]);
    out.push_back(forwardOpOutputs(graph, prog, layers[l].kind, layers[l].attributes, fo, lists[l],
                                   inputs[l][kWeight].shape(),
                                   {dnai, "layer" + std::to_string(l)}));
  }
  return out;
}

std::vector<std::vector<Tensor>>
growNetworkBackward(Graph &graph, Sequence &prog, const std::vector<NetworkLayer> &layers,
                    const std::vector<std::vector<Tensor>> &gradInputs,
                    const std::vector<std::vector<TensorSpec>> &outputs, const DebugContext &dc) {
  checkLayers(layers, gradInputs.size());
  if (outputs.size() != layers.size())
    fail(std::to_string(layers.size()) + " layers but grad output specs for " +
         std::to_string(outputs.size()));
  DebugInfo info(dc, "snn_ipu");
  const DebugNameAndId dnai(info, "SnnNetworkGrad");
  const std::size_t n = layers.size();
  // The same places in both grad ops' inputs.
  static_assert(int(ops::spiking::kGradInIds) == int(ops::readout::kGradInIds), "grad inputs");
  static_assert(int(ops::spiking::kGradInCounts) == int(ops::readout::kGradInCounts),
                "grad inputs");
  using ops::spiking::kGradInCounts;
  using ops::spiking::kGradInIds;
  std::vector<BackwardOp> ops;
  for (std::size_t l = 0; l < n; ++l) {
    const DebugNameAndId ldnai(dnai, "layer" + std::to_string(l));
    std::vector<Tensor> gin = gradInputs[l];
    if (gin.size() <= kGradInCounts)
      fail("layer " + std::to_string(l) + " has too few grad inputs");
    if (l > 0) { // its list: the layer before's, one step late
      const std::vector<Tensor> &before = gradInputs[l - 1];
      if (before.size() <= ops::spiking::kGradCounts)
        fail("layer " + std::to_string(l - 1) + " has too few grad inputs");
      gin[kGradInIds] = delayed(graph, before[ops::spiking::kGradIds], ldnai, "inIds");
      gin[kGradInCounts] = delayed(graph, before[ops::spiking::kGradCounts], ldnai, "inCounts");
    }
    ops.push_back(backwardOp(graph, prog, layers[l].kind, layers[l].attributes, gin, ldnai));
  }
  std::vector<BackwardLoop> loops;
  for (BackwardOp &op : ops)
    loops.push_back(op.layer.beginBackward(prog, op.inputs));
  for (std::size_t l = 1; l < n; ++l) // no layer after sends a gradient to step T-1
    popops::zero(graph, loops[l].stepGradIn, prog, {dnai, "gradIn[T]=0"});
  const unsigned steps = unsigned(gradInputs[0][kGradInIds].dim(0));
  const unsigned tile0 = unsigned(layers[0].attributes.firstTile);
  Tensor t = graph.addVariable(UNSIGNED_INT, {1}, {dnai, "t"});
  graph.setTileMapping(t, tile0);
  const Tensor last = counter(graph, tile0, dnai, "T-1", steps - 1);
  const Tensor one = counter(graph, tile0, dnai, "one", 1);
  prog.add(Copy(last, t, false, {dnai, "t=T-1"}));

  Sequence body;
  auto each = [&](auto &&f) {
    for (std::size_t l = 0; l < n; ++l)
      f(ops[l].layer, loops[l], l);
  };
  auto eachPhase = [&](const std::string &name, auto &&f) {
    phase(graph, body, dnai, name, [&](ComputeSet cs) {
      each([&](LayerGraph &g, BackwardLoop &L, std::size_t l) { f(cs, g, L, l); });
    });
  };
  exchange(body, [&](Sequence &slices, Sequence &copies) {
    each([&](LayerGraph &g, BackwardLoop &L, std::size_t) {
      g.exchangeGradInputs(slices, copies, L, t);
    });
  });
  // dL/dvalues[t] of layer l += layer l+1's dL/d(in_values)[t+1], which its step
  // variable holds until its reduction of step t.
  each([&](LayerGraph &, BackwardLoop &L, std::size_t l) {
    if (l + 1 < n)
      popops::addInPlace(graph, L.gradT, loops[l + 1].stepGradIn, body,
                         {dnai, "grad[t]+=next layer's"});
  });
  const bool anyRecurrent =
      std::any_of(ops.begin(), ops.end(), [](const BackwardOp &op) { return op.layer.recurrent(); });
  if (anyRecurrent) {
    eachPhase("recurrentInputGrad", [&](ComputeSet cs, LayerGraph &g, BackwardLoop &L, std::size_t) {
      if (g.recurrent())
        g.addRecurrentInputGrad(cs, L);
    });
    exchange(body, [&](Sequence &zeros, Sequence &copies) {
      each([&](LayerGraph &g, BackwardLoop &L, std::size_t) {
        if (g.recurrent())
          g.exchangeRecurrentPartials(zeros, copies, L);
      });
    });
    eachPhase("recurrentReduce", [&](ComputeSet cs, LayerGraph &g, BackwardLoop &L, std::size_t) {
      if (g.recurrent())
        g.addRecurrentReduce(cs, L);
    });
    each([&](LayerGraph &g, BackwardLoop &L, std::size_t) {
      if (g.recurrent())
        g.addRecurrentGrad(body, L);
    });
  }
  each([&](LayerGraph &g, BackwardLoop &L, std::size_t) { g.exchangeStepGrad(body, L); });
  if (layers[0].kind == OpKind::Spiking) // else a lone readout, which lists nothing
    eachPhase("tileListSlice", [&](ComputeSet cs, LayerGraph &g, BackwardLoop &L, std::size_t) {
      if (!g.readout())
        g.addTileListSlice(cs, L);
    });
  eachPhase("stateGrad", [&](ComputeSet cs, LayerGraph &g, BackwardLoop &L, std::size_t) {
    g.addStateGrad(cs, L);
  });
  unsigned rounds = 0;
  for (const BackwardOp &op : ops)
    rounds = std::max(rounds, op.layer.weightGradRounds());
  for (unsigned r = 0; r < rounds; ++r)
    eachPhase("weightGrad", [&](ComputeSet cs, LayerGraph &g, BackwardLoop &L, std::size_t) {
      if (r < g.weightGradRounds())
        g.addWeightGrad(cs, L, r);
    });
  eachPhase("inputGrad", [&](ComputeSet cs, LayerGraph &g, BackwardLoop &L, std::size_t) {
    g.addInputGrad(cs, L);
  });
  exchange(body, [&](Sequence &zeros, Sequence &copies) {
    each([&](LayerGraph &g, BackwardLoop &L, std::size_t) {
      g.exchangeInputGradPartials(zeros, copies, L);
    });
  });
  eachPhase("inputGradReduce", [&](ComputeSet cs, LayerGraph &g, BackwardLoop &L, std::size_t) {
    g.addInputGradReduce(cs, L);
  });
  each([&](LayerGraph &g, BackwardLoop &L, std::size_t) { g.writeGradStep(body, L, t); });
  popops::subInPlace(graph, t, one, body, {dnai, "t-=1"});
  prog.add(Repeat(steps, body, {dnai, "timeLoopBack"}));

  std::vector<std::vector<Tensor>> out;
  for (std::size_t l = 0; l < n; ++l) {
    const BackwardOutputs bo = ops[l].layer.endBackward(prog, loops[l]);
    out.push_back(backwardOpOutputs(graph, prog, layers[l].kind, layers[l].attributes, bo,
                                    outputs[l],
                                    {dnai, "layer" + std::to_string(l)}));
  }
  return out;
}

} // namespace ipu
} // namespace snn
