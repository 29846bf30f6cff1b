// _C.layer_forward(ForwardCall) and _C.layer_backward(BackwardCall): a layer's
// whole time loop in the host executor. The call's fields are checked here,
// before any kernel runs; the executor then runs with the GIL released.
#include "LayerBindings.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <pybind11/stl.h>

#include <poplar/HalfFloat.hpp>

#include "CompactList.hpp"
#include "LayerCall.hpp"
#include "LayerForward.hpp"
#include "MemoryBudget.hpp"
#include "ThreadPool.hpp"

namespace snn {

namespace {

FloatArray zeros(std::initializer_list<py::ssize_t> shape) {
  FloatArray a{std::vector<py::ssize_t>(shape)};
  std::fill(a.mutable_data(), a.mutable_data() + a.size(), 0.0f);
  return a;
}

// An optional array of exactly this shape: its data, or null where absent.
template <typename T>
const T *optionalData(const std::optional<py::array_t<T, py::array::c_style | py::array::forcecast>> &a,
                      std::initializer_list<py::ssize_t> shape, const char *name) {
  if (!a)
    return nullptr;
  requireShape(*a, shape, name);
  return a->data();
}

// A call's shapes, codes, neuron parameters and weights, checked.
struct LayerArgs {
  Shape shape{};
  NeuronSpec neuron{};
  std::unique_ptr<TileLayout> layout;
  const LayerCall &call;
  WeightArg weight, recWeight;
  bool recurrent = false;
  unsigned threads = 1, groups = 1;
  // The input list's K, and its rows' starts where it is compact (a backward
  // call's private copy; SpikeListView).
  unsigned inCapacity = 0;
  std::vector<std::size_t> inRowStart;

  // compactInput: the input list may be compact (backward calls).
  LayerArgs(const LayerCall &c, bool scanInput, bool compactInput = false) : call(c) {
    const NeuronSettings &n = c.neuron;
    requireCode(int(n.model), kNumModels, "model");
    requireCode(int(n.reset), kNumResets, "reset");
    requireCode(int(n.surrogate), kNumSurrogates, "surrogate");
    if (std::isnan(n.gradWindow) || n.gradWindow < 0)
      throw std::invalid_argument("grad_window must be >= 0 (inf: every neuron eligible)");
    if (c.sampleGroups < 1)
      throw std::invalid_argument("sample_groups must be >= 1");
    weight = toWeight(c.weight, "weight");
    if (weight.array.ndim() != 2)
      throw std::invalid_argument("weight must be [out, in]");
    const unsigned out = unsigned(weight.rows()), in = unsigned(weight.cols());
    const bool compact = compactInput && c.inIds.ndim() == 1;
    if (compact ? c.inCounts.ndim() != 3 : c.inIds.ndim() != 3)
      throw std::invalid_argument(compactInput ? "in_ids must be [T, B, K], or compact with "
                                                 "in_counts [T, B, 2]"
                                               : "in_ids must be [T, B, K]");
    const IntArray &dims = compact ? c.inCounts : c.inIds;
    shape = {unsigned(dims.shape(0)), unsigned(dims.shape(1)), in, out};
    inCapacity = compact ? c.inCapacity : unsigned(c.inIds.shape(2));
    checkSpikeList(c.inIds, c.inCounts, shape.steps, shape.batch, in, false, "input list",
                   scanInput, compactInput ? &inRowStart : nullptr, inCapacity);
    layout = std::make_unique<TileLayout>(c.tileStarts.data(), c.tileStarts.size(), out);
    const py::ssize_t N = out, B = shape.batch;
    const float *bias = optionalData(c.bias, {N}, "bias");
    requireShape(c.beta, {N}, "beta");
    const bool spiking = n.model != MODEL_READOUT, synaptic = n.model == MODEL_SYNAPTIC;
    if (spiking != bool(c.threshold))
      throw std::invalid_argument(spiking ? "a spiking layer needs a threshold"
                                          : "the readout has no threshold");
    if (synaptic != bool(c.alpha))
      throw std::invalid_argument(synaptic ? "a synaptic layer needs alpha"
                                           : "only a synaptic layer has alpha");
    const float *threshold = optionalData(c.threshold, {N}, "threshold");
    const float *alpha = optionalData(c.alpha, {N}, "alpha");
    if (c.recWeight) {
      if (!spiking)
        throw std::invalid_argument("the readout has no recurrent weight");
      recWeight = toWeight(*c.recWeight, "rec_weight");
      requireShape(recWeight.array, {N, N}, "rec_weight");
      if (recWeight.isHalf != weight.isHalf)
        throw std::invalid_argument("weight and rec_weight must have the same dtype");
      recurrent = true;
    }
    optionalData(c.initialMembrane, {B, N}, "initial_membrane");
    optionalData(c.initialSynaptic, {B, N}, "initial_synaptic");
    neuron = {n.model,          n.reset,     n.surrogate, n.surrogateParam,
              n.surrogateHeight, n.gradWindow, c.beta.data(), threshold,
              alpha,            bias};
    threads = c.numThreads > 0 ? c.numThreads : hardwareThreads();
    groups = c.sampleGroups;
  }

  SpikeListView input() const {
    return listView(call.inIds, call.inCounts, inRowStart, inCapacity);
  }

  template <typename WT> const WT *weightData() const {
    return static_cast<const WT *>(weight.data());
  }
  template <typename WT> const WT *recWeightData() const {
    return recurrent ? static_cast<const WT *>(recWeight.data()) : nullptr;
  }
};

// Raises the executor's scan error for the first fault of a call's input list
// (its counts or an id outside the input), as a call that scans its input does.
[[noreturn]] void nameInputFault(const LayerArgs &a) {
  checkSpikeList(a.call.inIds, a.call.inCounts, a.shape.steps, a.shape.batch,
                 a.shape.inFeatures, false, "input list");
  throw std::logic_error("the input list's copy found an id outside the input that the "
                         "scan did not");
}

template <typename WT> ForwardResult forward(const LayerArgs &a, ForwardOptions &options) {
  const Shape &s = a.shape;
  const py::ssize_t T = s.steps, B = s.batch, N = s.outFeatures;
  // Lists written in place (before the layer takes its options) are [T, B, out], with
  // their compact copy: K is out.
  const bool direct = directRows(a.neuron, a.layout->numTiles(), a.recurrent, options.capacity);
  std::optional<IntArray> ids, directCompact;
  std::optional<FloatArray> membrane;
  if (direct) {
    options.budget->take(std::uint64_t(T * B * N) * (2 * sizeof(int32_t) + sizeof(float)),
                         "the output lists [T, B, out]");
    ids.emplace(std::vector<py::ssize_t>{T, B, N});
    membrane.emplace(std::vector<py::ssize_t>{T, B, N});
    directCompact.emplace(std::vector<py::ssize_t>{T * B * N});
    options.directIds = ids->mutable_data();
    options.directMembrane = membrane->mutable_data();
    options.directCompact = directCompact->mutable_data();
  }
  LayerForward<WT> layer(s, a.neuron, *a.layout, listView(a.call.inIds, a.call.inCounts),
                         a.weightData<WT>(), a.recWeightData<WT>(), options);
  const bool copying = options.inputCopy != nullptr;
  ForwardResult result;
  if (a.neuron.model == MODEL_READOUT) {
    options.budget->take(std::uint64_t(T * B * N) * sizeof(float), "the membrane [T, B, out]");
    result.membrane = FloatArray({T, B, N});
    float *m = result.membrane.mutable_data();
    {
      py::gil_scoped_release release;
      layer.run(m, nullptr);
    }
    result.bucketedSteps = std::int64_t(layer.bucketedSteps());
    if (copying && options.inputCopy->outside)
      nameInputFault(a);
    return result;
  }
  const bool dense = options.keepDenseState, withState = options.returnState;
  const bool synaptic = a.neuron.model == MODEL_SYNAPTIC;
  float *dm = nullptr, *ds = nullptr, *fm = nullptr, *fs = nullptr, *fk = nullptr;
  if (dense) {
    options.budget->take(std::uint64_t(T * B * N) * sizeof(float) * (synaptic ? 2 : 1),
                         "the dense state history [T, B, out]");
    result.denseMembrane = FloatArray({T, B, N});
    dm = result.denseMembrane->mutable_data();
    if (synaptic) {
      result.denseSynaptic = FloatArray({T, B, N});
      ds = result.denseSynaptic->mutable_data();
    }
  }
  if (withState) {
    result.finalMembrane = FloatArray({B, N});
    result.finalSpikes = FloatArray({B, N});
    fm = result.finalMembrane->mutable_data();
    fk = result.finalSpikes->mutable_data();
    if (synaptic) {
      result.finalSynaptic = FloatArray({B, N});
      fs = result.finalSynaptic->mutable_data();
    }
  }
  ForwardStats stats;
  {
    py::gil_scoped_release release;
    layer.run(dm, ds);
    result.bucketedSteps = std::int64_t(layer.bucketedSteps());
    if (!(copying && options.inputCopy->outside)) {
      if (withState)
        layer.finalState(fm, fs, fk);
      stats = layer.decideCapacity();
    }
  }
  if (copying && options.inputCopy->outside)
    nameInputFault(a);
  const py::ssize_t K = stats.capacity;
  if (direct && K != N) {
    // no row listed every neuron (NaN or -inf membranes): each row's first K entries
    IntArray cut({T, B, K});
    FloatArray cutMembrane({T, B, K});
    for (py::ssize_t row = 0; row < T * B; ++row) {
      std::memcpy(cut.mutable_data() + row * K, ids->data() + row * N, K * sizeof(int32_t));
      std::memcpy(cutMembrane.mutable_data() + row * K, membrane->data() + row * N,
                  K * sizeof(float));
    }
    ids = std::move(cut);
    membrane = std::move(cutMembrane);
  }
  if (!direct) {
    options.budget->take(std::uint64_t(T * B * K) * (sizeof(int32_t) + 2 * sizeof(float)),
                         "the output lists [T, B, K]");
    ids.emplace(std::vector<py::ssize_t>{T, B, K});
    membrane.emplace(std::vector<py::ssize_t>{T, B, K});
  }
  IntArray counts({T, B, py::ssize_t(2)});
  FloatArray values({T, B, K});
  int32_t *idsPtr = ids->mutable_data(), *countsPtr = counts.mutable_data();
  float *membranePtr = membrane->mutable_data(), *valuesPtr = values.mutable_data();
  // The backward's private copy of the list (emulator.py's _PrivateList), compact:
  // written in place where every row lists every neuron.
  const std::vector<std::size_t> compactStart = layer.compactRowStarts();
  IntArray privateIds = direct && py::ssize_t(compactStart.back()) == T * B * N
                            ? *directCompact
                            : IntArray({py::ssize_t(compactStart.back())});
  {
    int32_t *privatePtr = privateIds.mutable_data();
    py::gil_scoped_release release;
    layer.combine(idsPtr, countsPtr, membranePtr, valuesPtr, privatePtr, compactStart.data());
    stats = layer.stats();
  }
  if (stats.spikesDropped > 0) {
    // as a CSR list for the backward, where they still reset their neurons
    std::vector<int32_t> dropped;
    IntArray droppedCounts({T, B});
    {
      int32_t *dc = droppedCounts.mutable_data();
      py::gil_scoped_release release;
      layer.droppedSpikes(countsPtr, dropped, dc);
    }
    IntArray droppedIds({py::ssize_t(dropped.size())});
    std::copy(dropped.begin(), dropped.end(), droppedIds.mutable_data());
    result.droppedIds = droppedIds;
    result.droppedCounts = droppedCounts;
  }
  IntArray privateCounts({T, B, py::ssize_t(2)});
  std::copy(countsPtr, countsPtr + privateCounts.size(), privateCounts.mutable_data());
  result.privateIds = std::move(privateIds);
  result.privateCounts = std::move(privateCounts);
  result.privateSpikes = stats.listedSpikes;
  result.ids = *ids;
  result.counts = counts;
  result.membrane = *membrane;
  result.values = values;
  result.totalSpikes = stats.totalSpikes;
  result.eligibleListed = stats.eligibleListed;
  result.spikesDropped = stats.spikesDropped;
  result.eligibleDropped = stats.eligibleDropped;
  result.neededCapacity = stats.neededCapacity;
  const OverflowAt &o = stats.overflowAt;
  if (o.happened)
    result.overflowAt = py::make_tuple(o.step, o.sample, o.spikes, o.needed);
  return result;
}

ForwardResult layerForward(const ForwardCall &call) {
  const LayerArgs a(call.layer, call.scanInput && !call.copyInput);
  requireCode(int(call.overflow), kNumOverflowPolicies, "overflow");
  const py::ssize_t T = a.shape.steps, B = a.shape.batch, N = a.shape.outFeatures;
  ForwardOptions options{call.capacity, call.overflow, call.keepDenseState, a.threads};
  if (call.inputCurrents) {
    // a GEMM's output, rows N or N rounded up to 8 floats apart
    const py::ssize_t padded = (N + 7) / 8 * 8;
    const FloatArray &c = *call.inputCurrents;
    requireShape(c, {T, B, c.ndim() == 3 && c.shape(2) == padded ? padded : N},
                 "input_currents");
    options.inputCurrents = c.data();
    options.inputCurrentsStride = unsigned(c.shape(2));
  }
  options.initialMembrane = call.layer.initialMembrane ? call.layer.initialMembrane->data()
                                                       : nullptr;
  options.initialSynaptic = call.layer.initialSynaptic ? call.layer.initialSynaptic->data()
                                                       : nullptr;
  options.initialSpikes = optionalData(call.initialSpikes, {B, N}, "initial_spikes");
  options.returnState = call.returnState;
  options.sampleGroups = a.groups;
  MemoryBudget budget(call.memoryBudget);
  options.budget = &budget;
  if (!call.copyInput)
    return a.weight.isHalf ? forward<half>(a, options) : forward<float>(a, options);
  if (call.inputCurrents)
    throw std::invalid_argument("copy_input is the sparse path's: no input_currents");
  std::vector<std::size_t> start(std::size_t(T) * std::size_t(B) + 1);
  std::int64_t spikes = 0;
  if (compactRowStarts(call.layer.inCounts.data(), std::size_t(T) * std::size_t(B),
                       a.inCapacity, start.data(), spikes))
    nameInputFault(a);
  if (double(spikes) > call.denseAbove) {
    ForwardResult result;
    result.wantsDense = true;
    result.inputSpikes = spikes;
    return result;
  }
  IntArray ids({py::ssize_t(start.back())}), counts({T, B, py::ssize_t(2)});
  std::memcpy(counts.mutable_data(), call.layer.inCounts.data(),
              std::size_t(counts.size()) * sizeof(int32_t));
  ListCopy copy{start.data(), ids.mutable_data(), a.shape.inFeatures};
  options.inputCopy = &copy;
  ForwardResult result = a.weight.isHalf ? forward<half>(a, options) : forward<float>(a, options);
  result.inputIds = std::move(ids);
  result.inputCounts = std::move(counts);
  result.inputSpikes = spikes;
  return result;
}

// Row starts of a spike list in CSR form, after checking it: counts [rows]
// >= 0 summing to the number of ids, each row's ids ascending and < N.
std::vector<std::size_t> csrRows(const IntArray &ids, const IntArray &counts, py::ssize_t T,
                                 py::ssize_t B, py::ssize_t N, const char *name) {
  requireShape(counts, {T, B}, name);
  if (ids.ndim() != 1)
    throw std::invalid_argument(std::string(name) + ": ids must be 1-D");
  const int32_t *c = counts.data(), *id = ids.data();
  const std::size_t rows = std::size_t(T) * std::size_t(B), total = std::size_t(ids.size());
  std::vector<std::size_t> start(rows + 1, 0);
  for (std::size_t r = 0; r < rows; ++r) {
    if (c[r] < 0 || start[r] + std::size_t(c[r]) > total)
      throw std::invalid_argument(std::string(name) + ": counts must be >= 0 and sum to "
                                                      "the number of ids");
    start[r + 1] = start[r] + std::size_t(c[r]);
    for (std::size_t k = start[r]; k < start[r + 1]; ++k)
      if (id[k] < 0 || id[k] >= N || (k > start[r] && id[k] <= id[k - 1]))
        throw std::invalid_argument(std::string(name) + ": ids must ascend within a row, "
                                                        "in [0, out)");
  }
  if (start[rows] != total)
    throw std::invalid_argument(std::string(name) + ": counts must be >= 0 and sum to the "
                                                    "number of ids");
  return start;
}

template <typename WT>
BackwardResult backward(const LayerArgs &a, const BackwardInputs &in, const GradNeeds &needs) {
  const Shape &s = a.shape;
  const py::ssize_t T = s.steps, B = s.batch, N = s.outFeatures, I = s.inFeatures;
  BackwardResult result;
  BackwardOutputs out{};
  // Outputs the executor writes whole (weight gradients from the tiles' blocks,
  // dL/dI, dL/d(input values) zeroed by its threads) skip the zero-fill here;
  // the others are accumulated into.
  auto add = [&](bool wanted, std::optional<FloatArray> &slot,
                 std::initializer_list<py::ssize_t> shape, float *&ptr, bool writtenWhole) {
    if (!wanted)
      return;
    slot = writtenWhole ? FloatArray{std::vector<py::ssize_t>(shape)} : zeros(shape);
    ptr = slot->mutable_data();
  };
  add(needs.input, result.gradInValues, {T, B, a.inCapacity}, out.gradIn, true);
  add(needs.weight, result.gradWeight, {N, I}, out.gradWeight, true);
  add(needs.bias, result.gradBias, {N}, out.gradBias, false);
  add(needs.recWeight, result.gradRecWeight, {N, N}, out.gradRecWeight, true);
  add(needs.beta, result.gradBeta, {N}, out.gradBeta, false);
  add(needs.threshold, result.gradThreshold, {N}, out.gradThreshold, false);
  add(needs.alpha, result.gradAlpha, {N}, out.gradAlpha, false);
  add(needs.current, result.gradCurrent, {T, B, N}, out.gradCurrent, true);
  LayerBackward<WT> layer(s, a.neuron, *a.layout, in, a.weightData<WT>(), a.recWeightData<WT>(),
                          needs, a.threads, a.groups);
  {
    py::gil_scoped_release release;
    layer.run(out);
  }
  result.bucketedSteps = std::int64_t(layer.bucketedSteps());
  result.inputGradBucketedSteps = std::int64_t(layer.inputGradBucketedSteps());
  result.inputGradWalkedOutputs = layer.inputGradWalkedOutputs();
  return result;
}

BackwardResult layerBackward(const BackwardCall &call) {
  const LayerArgs a(call.layer, call.scanLists, true);
  const unsigned model = call.layer.neuron.model;
  const bool spiking = model != MODEL_READOUT;
  GradNeeds needs = call.needs;
  needs.bias = needs.bias && call.layer.bias.has_value();
  needs.recWeight = needs.recWeight && a.recurrent;
  needs.threshold = needs.threshold && spiking;
  needs.alpha = needs.alpha && model == MODEL_SYNAPTIC;
  const py::ssize_t T = a.shape.steps, B = a.shape.batch, N = a.shape.outFeatures;
  BackwardInputs in{};
  in.input = a.input();
  std::vector<std::size_t> outRowStart;
  if (!spiking) {
    requireShape(call.membrane, {T, B, N}, "membrane");
    requireShape(call.gradOut, {T, B, N}, "grad_out");
  } else {
    if (!call.outIds || !call.outCounts)
      throw std::invalid_argument("a spiking layer's backward needs its output list");
    // A compact output list's K is the membrane's.
    const bool compact = call.outIds->ndim() == 1;
    if (compact && call.membrane.ndim() != 3)
      throw std::invalid_argument("membrane must be [T, B, K]");
    const py::ssize_t K = compact ? call.membrane.shape(2) : call.outIds->shape(2);
    checkSpikeList(*call.outIds, *call.outCounts, a.shape.steps, a.shape.batch, N, true,
                   "output list", call.scanLists, &outRowStart, unsigned(K));
    requireShape(call.membrane, {T, B, K}, "membrane");
    requireShape(call.gradOut, {T, B, K}, "grad_out");
    in.output = listView(*call.outIds, *call.outCounts, outRowStart, unsigned(K));
    in.denseMembrane = optionalData(call.denseMembrane, {T, B, N}, "dense_membrane");
    in.denseSynaptic = optionalData(call.denseSynaptic, {T, B, N}, "dense_synaptic");
    if (needs.beta && !in.denseMembrane)
      throw std::invalid_argument("the gradient of beta needs dense_membrane");
    if (needs.alpha && !in.denseSynaptic)
      throw std::invalid_argument("the gradient of alpha needs dense_synaptic");
  }
  std::vector<std::size_t> droppedStart;
  if (call.droppedIds || call.droppedCounts) {
    if (!call.droppedIds || !call.droppedCounts || !spiking)
      throw std::invalid_argument("dropped_ids and dropped_counts go together, for a spiking "
                                  "layer");
    droppedStart = csrRows(*call.droppedIds, *call.droppedCounts, T, B, N, "dropped spikes");
    in.droppedIds = call.droppedIds->data();
    in.droppedStart = droppedStart.data();
  }
  in.initialMembrane = call.layer.initialMembrane ? call.layer.initialMembrane->data()
                                                  : nullptr;
  in.initialSynaptic = call.layer.initialSynaptic ? call.layer.initialSynaptic->data()
                                                  : nullptr;
  std::vector<std::size_t> initialStart;
  if (call.initialSpikeIds || call.initialSpikeCounts) {
    if (!call.initialSpikeIds || !call.initialSpikeCounts)
      throw std::invalid_argument("initial_spike_ids and initial_spike_counts go together");
    initialStart = csrRows(*call.initialSpikeIds, *call.initialSpikeCounts, 1, B, N,
                           "initial spikes");
    in.initialSpikeIds = call.initialSpikeIds->data();
    in.initialSpikeStart = initialStart.data();
  }
  in.initialRecurrentCap = call.initialRecurrentCap;
  in.membrane = call.membrane.data();
  in.gradOut = call.gradOut.data();
  return a.weight.isHalf ? backward<half>(a, in, needs) : backward<float>(a, in, needs);
}

} // namespace

void registerLayerBindings(py::module_ &m) {
  registerLayerCallClasses(m);
  m.def("layer_forward", &layerForward, py::arg("call"),
        "A layer's forward pass over all steps (a ForwardCall) -> ForwardResult.");
  m.def("layer_backward", &layerBackward, py::arg("call"),
        "A layer's backward pass over all steps (a BackwardCall) -> BackwardResult.");
}

} // namespace snn
