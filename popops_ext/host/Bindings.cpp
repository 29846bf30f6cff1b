// The snn_ipu._C module: layer_forward / layer_backward run a layer's whole
// time loop in the host executor, with the integer codes, spike-list format
// and result dicts of the Python/C++ contract; plus the planner's bindings.
#include <algorithm>
#include <cmath>
#include <memory>
#include <cstdlib>
#include <stdexcept>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <poplar/HalfFloat.hpp>

#include "LayerBackward.hpp"
#include "LayerForward.hpp"
#include "NumpyArgs.hpp"
#include "SpikeCounts.hpp"
#include "SpikeMatmulRun.hpp"
#include "ThreadPool.hpp"
#include "plan/PlanBindings.hpp"

namespace py = pybind11;
using namespace snn;

namespace {

// Every layer call allocates a few MB of short-lived buffers and outputs
// (tile lists, weight blocks, [T, B, K] arrays). With glibc's defaults those
// are fresh mmaps, and first-touch page faults cost as much as the kernels at
// low activity; keep them on the heap for reuse. Skipped when the user tuned
// malloc through the environment or set SNN_IPU_KEEP_MALLOC.
void tuneMalloc() {
#if defined(__GLIBC__)
  if (std::getenv("SNN_IPU_KEEP_MALLOC") || std::getenv("MALLOC_MMAP_THRESHOLD_") ||
      std::getenv("MALLOC_TRIM_THRESHOLD_"))
    return;
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

unsigned threadCount(int requested) {
  return requested > 0 ? unsigned(requested) : hardwareThreads();
}

unsigned groupCount(int sampleGroups) {
  if (sampleGroups < 1)
    throw std::invalid_argument("sample_groups must be >= 1");
  return unsigned(sampleGroups);
}

FloatArray zeros(std::initializer_list<py::ssize_t> shape) {
  FloatArray a{std::vector<py::ssize_t>(shape)};
  std::fill(a.mutable_data(), a.mutable_data() + a.size(), 0.0f);
  return a;
}

// Shared by forward and backward: codes, shapes of the parameters, weights.
struct LayerArgs {
  Shape shape{};
  NeuronSpec neuron{};
  std::unique_ptr<TileLayout> layout;
  IntArray inIds, inCounts;
  WeightArg weight, recWeight;
  FloatArray bias, beta, threshold, alpha;
  bool recurrent = false;

  LayerArgs(int model, int reset, int surrogateKind, float p0, float p1, float gradWindow,
            const IntArray &tileStarts, const IntArray &inIds_, const IntArray &inCounts_,
            const py::array &weight_, const FloatArray &bias_, const py::array &recWeight_,
            const FloatArray &beta_, const FloatArray &threshold_, const FloatArray &alpha_,
            bool scanLists = true)
      : inIds(inIds_), inCounts(inCounts_), bias(bias_), beta(beta_), threshold(threshold_),
        alpha(alpha_) {
    requireCode(model, 3, "model");
    requireCode(reset, 3, "reset");
    requireCode(surrogateKind, 5, "surrogate");
    if (std::isnan(gradWindow))
      throw std::invalid_argument("grad_window is NaN");
    weight = toWeight(weight_, "weight");
    if (weight.array.ndim() != 2)
      throw std::invalid_argument("weight must be [out, in]");
    const unsigned out = unsigned(weight.rows()), in = unsigned(weight.cols());
    if (inIds.ndim() != 3)
      throw std::invalid_argument("in_ids must be [T, B, K]");
    shape = {unsigned(inIds.shape(0)), unsigned(inIds.shape(1)), in, out};
    checkSpikeList(inIds, inCounts, shape.steps, shape.batch, in, false, "input list",
                   scanLists);
    layout = std::make_unique<TileLayout>(tileStarts.data(), tileStarts.size(), out);
    const py::ssize_t n = out;
    const bool hasBias = optionalShape(bias, {n}, "bias");
    requireShape(beta, {n}, "beta");
    if (model != MODEL_READOUT)
      requireShape(threshold, {n}, "threshold");
    if (model == MODEL_SYNAPTIC)
      requireShape(alpha, {n}, "alpha");
    if (recWeight_.size() != 0) {
      if (model == MODEL_READOUT)
        throw std::invalid_argument("the readout has no recurrent weight");
      recWeight = toWeight(recWeight_, "rec_weight");
      requireShape(recWeight.array, {n, n}, "rec_weight");
      if (recWeight.isHalf != weight.isHalf)
        throw std::invalid_argument("weight and rec_weight must have the same dtype");
      recurrent = true;
    }
    neuron = {model,
              unsigned(reset),
              unsigned(surrogateKind),
              p0,
              p1,
              gradWindow,
              beta.data(),
              model == MODEL_READOUT ? nullptr : threshold.data(),
              model == MODEL_SYNAPTIC ? alpha.data() : nullptr,
              hasBias ? bias.data() : nullptr};
  }

  template <typename WT> const WT *weightData() const {
    return static_cast<const WT *>(weight.data());
  }
  template <typename WT> const WT *recWeightData() const {
    return recurrent ? static_cast<const WT *>(recWeight.data()) : nullptr;
  }
};

template <typename WT>
py::dict forward(const LayerArgs &a, const ForwardOptions &options) {
  const Shape &s = a.shape;
  const py::ssize_t T = s.steps, B = s.batch, N = s.outFeatures;
  LayerForward<WT> layer(s, a.neuron, *a.layout, listView(a.inIds, a.inCounts),
                         a.weightData<WT>(), a.recWeightData<WT>(), options);
  py::dict result;
  if (a.neuron.model == MODEL_READOUT) {
    FloatArray membrane({T, B, N});
    float *m = membrane.mutable_data();
    {
      py::gil_scoped_release release;
      layer.run(m, nullptr);
    }
    result["membrane"] = membrane;
    return result;
  }
  const bool withState = options.returnState;
  const bool dense = options.keepDenseState;
  const bool synaptic = a.neuron.model == MODEL_SYNAPTIC;
  if (dense)
    options.budget->take(std::uint64_t(T * B * N) * sizeof(float) * (synaptic ? 2 : 1),
                         "the dense state history [T, B, out]");
  FloatArray denseMembrane = dense ? FloatArray({T, B, N}) : FloatArray({py::ssize_t(0)});
  FloatArray denseSyn = dense && synaptic ? FloatArray({T, B, N}) : FloatArray({py::ssize_t(0)});
  float *dm = dense ? denseMembrane.mutable_data() : nullptr;
  float *ds = dense && synaptic ? denseSyn.mutable_data() : nullptr;
  ForwardStats stats;
  FloatArray finalMembrane({withState ? B : 0, withState ? N : 0});
  FloatArray finalSyn({withState && synaptic ? B : 0, withState && synaptic ? N : 0});
  FloatArray finalSpikes({withState ? B : 0, withState ? N : 0});
  {
    float *fm = withState ? finalMembrane.mutable_data() : nullptr;
    float *fs = withState && synaptic ? finalSyn.mutable_data() : nullptr;
    float *fk = withState ? finalSpikes.mutable_data() : nullptr;
    py::gil_scoped_release release;
    layer.run(dm, ds);
    if (withState)
      layer.finalState(fm, fs, fk);
    stats = layer.decideCapacity();
  }
  if (withState) {
    result["final_membrane"] = finalMembrane;
    result["final_syn"] = finalSyn;
    result["final_spikes"] = finalSpikes;
  }
  const py::ssize_t K = stats.capacity;
  options.budget->take(std::uint64_t(T * B * K) * (sizeof(int32_t) + 2 * sizeof(float)),
                       "the output lists [T, B, K]");
  IntArray ids({T, B, K});
  IntArray counts({T, B, py::ssize_t(2)});
  FloatArray membrane({T, B, K});
  FloatArray values({T, B, K});
  int32_t *idsPtr = ids.mutable_data(), *countsPtr = counts.mutable_data();
  float *membranePtr = membrane.mutable_data(), *valuesPtr = values.mutable_data();
  {
    py::gil_scoped_release release;
    layer.combine(idsPtr, countsPtr, membranePtr, valuesPtr);
    stats = layer.stats();
  }
  // Dropped spikes (overflow "drop") as a CSR list for the backward: ids, [T, B] counts.
  std::vector<int32_t> dropped;
  IntArray droppedCounts({py::ssize_t(0)});
  if (stats.spikesDropped > 0) {
    droppedCounts = IntArray({T, B});
    int32_t *dc = droppedCounts.mutable_data();
    py::gil_scoped_release release;
    layer.droppedSpikes(countsPtr, dropped, dc);
  }
  IntArray droppedIds({py::ssize_t(dropped.size())});
  std::copy(dropped.begin(), dropped.end(), droppedIds.mutable_data());
  result["ids"] = ids;
  result["counts"] = counts;
  result["dropped_ids"] = droppedIds;
  result["dropped_counts"] = droppedCounts;
  result["membrane"] = membrane;
  result["values"] = values;
  result["dense_membrane"] = denseMembrane;
  result["dense_syn"] = denseSyn;
  result["spikes_dropped"] = stats.spikesDropped;
  result["eligible_dropped"] = stats.eligibleDropped;
  result["needed_capacity"] = stats.neededCapacity;
  result["total_spikes"] = stats.totalSpikes;
  result["eligible_listed"] = stats.eligibleListed;
  const OverflowAt &o = stats.overflowAt;
  result["overflow_at"] =
      o.happened ? py::object(py::make_tuple(o.step, o.sample, o.spikes, o.needed))
                 : py::object(py::none());
  return result;
}

py::dict layerForward(int model, int reset, int surrogateKind, float p0, float p1,
                      float gradWindow, int capacity, int overflow, bool keepDenseState,
                      const IntArray &tileStarts, const IntArray &inIds,
                      const IntArray &inCounts, const py::array &weight,
                      const FloatArray &bias, const py::array &recWeight,
                      const FloatArray &beta, const FloatArray &threshold,
                      const FloatArray &alpha, int numThreads,
                      const FloatArray &inputCurrents, bool checkLists,
                      const FloatArray &initialMembrane, const FloatArray &initialSyn,
                      const FloatArray &initialSpikes, bool returnState, int sampleGroups,
                      std::uint64_t memoryBudget) {
  const LayerArgs a(model, reset, surrogateKind, p0, p1, gradWindow, tileStarts, inIds,
                    inCounts, weight, bias, recWeight, beta, threshold, alpha, checkLists);
  requireCode(overflow, 3, "overflow");
  if (capacity < 0)
    throw std::invalid_argument("capacity must be >= 0");
  const bool givenCurrents =
      optionalShape(inputCurrents, {a.shape.steps, a.shape.batch, a.shape.outFeatures},
                    "input_currents");
  ForwardOptions options{unsigned(capacity), overflow, keepDenseState,
                         threadCount(numThreads),
                         givenCurrents ? inputCurrents.data() : nullptr};
  const py::ssize_t B = a.shape.batch, N = a.shape.outFeatures;
  if (optionalShape(initialMembrane, {B, N}, "initial_membrane"))
    options.initialMembrane = initialMembrane.data();
  if (optionalShape(initialSyn, {B, N}, "initial_syn"))
    options.initialSynaptic = initialSyn.data();
  if (optionalShape(initialSpikes, {B, N}, "initial_spikes"))
    options.initialSpikes = initialSpikes.data();
  options.returnState = returnState;
  options.sampleGroups = groupCount(sampleGroups);
  MemoryBudget budget(memoryBudget);
  options.budget = &budget;
  return a.weight.isHalf ? forward<half>(a, options) : forward<float>(a, options);
}

// Row starts of the dropped-spike list, after checking it: counts [T, B] >= 0
// summing to the number of ids, each row's ids ascending and < N.
std::vector<std::size_t> droppedRows(const IntArray &ids, const IntArray &counts,
                                     py::ssize_t T, py::ssize_t B, py::ssize_t N) {
  requireShape(counts, {T, B}, "dropped_counts");
  if (ids.ndim() != 1)
    throw std::invalid_argument("dropped_ids must be 1-D");
  const int32_t *c = counts.data(), *id = ids.data();
  const std::size_t rows = std::size_t(T) * std::size_t(B), total = std::size_t(ids.size());
  std::vector<std::size_t> start(rows + 1, 0);
  for (std::size_t r = 0; r < rows; ++r) {
    if (c[r] < 0 || start[r] + std::size_t(c[r]) > total)
      throw std::invalid_argument("dropped_counts must be >= 0 and sum to len(dropped_ids)");
    start[r + 1] = start[r] + std::size_t(c[r]);
    for (std::size_t k = start[r]; k < start[r + 1]; ++k)
      if (id[k] < 0 || id[k] >= N || (k > start[r] && id[k] <= id[k - 1]))
        throw std::invalid_argument("dropped_ids must ascend within a row, in [0, out)");
  }
  if (start[rows] != total)
    throw std::invalid_argument("dropped_counts must be >= 0 and sum to len(dropped_ids)");
  return start;
}

template <typename WT>
py::dict backward(const LayerArgs &a, const BackwardInputs &in, const GradNeeds &needs,
                  unsigned numThreads, unsigned sampleGroups) {
  const Shape &s = a.shape;
  const py::ssize_t T = s.steps, B = s.batch, N = s.outFeatures, I = s.inFeatures;
  const bool spiking = a.neuron.model != MODEL_READOUT;
  const bool synaptic = a.neuron.model == MODEL_SYNAPTIC;
  py::dict result;
  BackwardOutputs out{};
  // Outputs the executor writes whole (weight gradients from the tiles'
  // blocks, dL/dI, dL/d(input values) zeroed by its threads) skip the
  // zero-fill here; the others are accumulated into.
  auto add = [&](bool wanted, const char *key, std::initializer_list<py::ssize_t> shape,
                 float *&ptr, bool writtenWhole = false) {
    if (!wanted)
      return;
    FloatArray g = writtenWhole ? FloatArray{std::vector<py::ssize_t>(shape)} : zeros(shape);
    ptr = g.mutable_data();
    result[key] = g;
  };
  add(needs.input, "grad_in_values", {T, B, py::ssize_t(a.inIds.shape(2))}, out.gradIn, true);
  add(needs.weight, "grad_weight", {N, I}, out.gradWeight, true);
  add(needs.bias, "grad_bias", {N}, out.gradBias);
  add(needs.recWeight, "grad_rec_weight", {N, N}, out.gradRecWeight, true);
  add(needs.beta, "grad_beta", {N}, out.gradBeta);
  add(needs.threshold && spiking, "grad_threshold", {N}, out.gradThreshold);
  add(needs.alpha && synaptic, "grad_alpha", {N}, out.gradAlpha);
  add(needs.current, "grad_current", {T, B, N}, out.gradCurrent, true);
  LayerBackward<WT> layer(s, a.neuron, *a.layout, in, a.weightData<WT>(),
                          a.recWeightData<WT>(), needs, numThreads, sampleGroups);
  {
    py::gil_scoped_release release;
    layer.run(out);
  }
  return result;
}

py::dict layerBackward(int model, int reset, int surrogateKind, float p0, float p1,
                       float gradWindow, const IntArray &tileStarts, const IntArray &inIds,
                       const IntArray &inCounts, const py::array &weight, bool hasBias,
                       const py::array &recWeight, const FloatArray &beta,
                       const FloatArray &threshold, const FloatArray &alpha,
                       const IntArray &outIds, const IntArray &outCounts,
                       const FloatArray &membrane, const FloatArray &denseMembrane,
                       const FloatArray &denseSyn, const FloatArray &gradOut,
                       const std::vector<bool> &needsList, int numThreads,
                       bool returnGradCurrent, bool checkLists, const IntArray &droppedIds,
                       const IntArray &droppedCounts, const FloatArray &initialMembrane,
                       const FloatArray &initialSyn, const IntArray &initialSpikeIds,
                       const IntArray &initialSpikeCounts, int initialRecurrentCap,
                       int sampleGroups) {
  const FloatArray noBias(std::vector<py::ssize_t>{0});
  const LayerArgs a(model, reset, surrogateKind, p0, p1, gradWindow, tileStarts, inIds,
                    inCounts, weight, noBias, recWeight, beta, threshold, alpha, checkLists);
  if (needsList.size() != 7)
    throw std::invalid_argument("needs must hold 7 flags");
  GradNeeds needs{needsList[0], needsList[1], needsList[2] && hasBias,
                  needsList[3] && a.recurrent, needsList[4], needsList[5],
                  needsList[6] && model == MODEL_SYNAPTIC};
  needs.current = returnGradCurrent;
  const py::ssize_t T = a.shape.steps, B = a.shape.batch, N = a.shape.outFeatures;
  BackwardInputs in{};
  in.input = listView(a.inIds, a.inCounts);
  if (model == MODEL_READOUT) {
    requireShape(membrane, {T, B, N}, "membrane");
    requireShape(gradOut, {T, B, N}, "grad_out");
  } else {
    checkSpikeList(outIds, outCounts, a.shape.steps, a.shape.batch, a.shape.outFeatures,
                   true, "output list", checkLists);
    const py::ssize_t K = outIds.shape(2);
    requireShape(membrane, {T, B, K}, "membrane");
    requireShape(gradOut, {T, B, K}, "grad_out");
    in.output = listView(outIds, outCounts);
    if (optionalShape(denseMembrane, {T, B, N}, "dense_membrane"))
      in.denseMembrane = denseMembrane.data();
    if (optionalShape(denseSyn, {T, B, N}, "dense_syn"))
      in.denseSynaptic = denseSyn.data();
    if (needs.beta && !in.denseMembrane)
      throw std::invalid_argument("grad of beta needs dense_membrane (keep_dense_state)");
    if (needs.alpha && !in.denseSynaptic)
      throw std::invalid_argument("grad of alpha needs dense_syn (keep_dense_state)");
  }
  std::vector<std::size_t> droppedStart;
  if (droppedCounts.size() != 0) {
    if (model == MODEL_READOUT)
      throw std::invalid_argument("the readout has no spike list to drop from");
    droppedStart = droppedRows(droppedIds, droppedCounts, T, B, N);
    in.droppedIds = droppedIds.data();
    in.droppedStart = droppedStart.data();
  } else if (droppedIds.size() != 0) {
    throw std::invalid_argument("dropped_ids given without dropped_counts");
  }
  if (optionalShape(initialMembrane, {B, N}, "initial_membrane"))
    in.initialMembrane = initialMembrane.data();
  if (optionalShape(initialSyn, {B, N}, "initial_syn"))
    in.initialSynaptic = initialSyn.data();
  std::vector<std::size_t> initialStart;
  if (initialSpikeCounts.size() != 0) {
    // One row per sample: the dropped-list format over a single step.
    initialStart = droppedRows(initialSpikeIds, initialSpikeCounts, 1, B, N);
    in.initialSpikeIds = initialSpikeIds.data();
    in.initialSpikeStart = initialStart.data();
  }
  if (initialRecurrentCap < 0)
    throw std::invalid_argument("initial_recurrent_cap must be >= 0");
  in.initialRecurrentCap = unsigned(initialRecurrentCap);
  in.membrane = membrane.data();
  in.gradOut = gradOut.data();
  const unsigned threads = threadCount(numThreads), groups = groupCount(sampleGroups);
  return a.weight.isHalf ? backward<half>(a, in, needs, threads, groups)
                         : backward<float>(a, in, needs, threads, groups);
}

// The spike-matmul kernel alone (benchmarks and tests): sum over t of the
// listed input spikes times W^T, with the time spent in the vertex calls.
py::dict spikeMatmul(const IntArray &tileStarts, const IntArray &inIds, const IntArray &inCounts,
                     const py::array &weight_, int numThreads, int sampleGroups) {
  const WeightArg weight = toWeight(weight_, "weight");
  if (weight.array.ndim() != 2)
    throw std::invalid_argument("weight must be [out, in]");
  if (inIds.ndim() != 3)
    throw std::invalid_argument("in_ids must be [T, B, K]");
  const Shape shape{unsigned(inIds.shape(0)), unsigned(inIds.shape(1)),
                    unsigned(weight.cols()), unsigned(weight.rows())};
  checkSpikeList(inIds, inCounts, shape.steps, shape.batch, shape.inFeatures, false,
                 "input list");
  const TileLayout layout(tileStarts.data(), tileStarts.size(), shape.outFeatures);
  FloatArray out = zeros({py::ssize_t(shape.batch), py::ssize_t(shape.outFeatures)});
  float *o = out.mutable_data();
  const SpikeListView input = listView(inIds, inCounts);
  const unsigned threads = threadCount(numThreads), groups = groupCount(sampleGroups);
  SpikeMatmulTiming timing{};
  {
    py::gil_scoped_release release;
    timing = weight.isHalf
                 ? spikeMatmulOverTime(shape, layout, input,
                                       static_cast<const half *>(weight.data()), threads, groups,
                                       o)
                 : spikeMatmulOverTime(shape, layout, input,
                                       static_cast<const float *>(weight.data()), threads,
                                       groups, o);
  }
  py::dict result;
  result["currents"] = out;
  result["kernel_seconds"] = timing.kernelSeconds;
  result["adds"] = timing.adds;
  return result;
}

// SparseSpikes.spike_counts (its values' dtype, float32 or float64) and its
// gradient. The list is scanned first (listed ids in range, counts
// consistent): a list edited through .data raises instead of writing out of
// bounds.
template <typename V> using Array = py::array_t<V, py::array::c_style | py::array::forcecast>;

// A whole [T, B, K] list scanned as the executor scans its input (its steps
// and samples taken from ids); returns its spike total.
std::int64_t checkWholeList(const IntArray &ids, const IntArray &counts, unsigned numIds,
                            const char *name) {
  if (ids.ndim() != 3)
    throw std::invalid_argument("ids must be [T, B, K], got " + std::to_string(ids.ndim()) +
                                " dimensions");
  return checkSpikeList(ids, counts, unsigned(ids.shape(0)), unsigned(ids.shape(1)), numIds,
                        false, name);
}

SpikeListView checkedCountList(const IntArray &ids, const IntArray &counts, int numNeurons) {
  if (numNeurons < 1)
    throw std::invalid_argument("num_neurons must be >= 1, got " + std::to_string(numNeurons));
  checkWholeList(ids, counts, unsigned(numNeurons), "spike list");
  return listView(ids, counts);
}

template <typename V>
py::array spikeCountsAs(const IntArray &ids, const IntArray &counts, const py::array &values,
                        int numNeurons) {
  const SpikeListView list = checkedCountList(ids, counts, numNeurons);
  const Array<V> v = Array<V>::ensure(values);
  requireShape(v, {ids.shape(0), ids.shape(1), ids.shape(2)}, "values");
  const unsigned T = unsigned(ids.shape(0)), B = unsigned(ids.shape(1));
  Array<V> out({py::ssize_t(B), py::ssize_t(numNeurons)});
  std::fill(out.mutable_data(), out.mutable_data() + out.size(), V(0));
  sumListedByNeuron(list, v.data(), T, B, unsigned(numNeurons), out.mutable_data());
  return std::move(out);
}

template <typename V>
py::array spikeCountsGradAs(const IntArray &ids, const IntArray &counts, const py::array &grad) {
  const Array<V> g = Array<V>::ensure(grad);
  if (g.ndim() != 2)
    throw std::invalid_argument("grad must be [B, num_neurons]");
  const SpikeListView list = checkedCountList(ids, counts, int(g.shape(1)));
  requireShape(g, {ids.shape(1), g.shape(1)}, "grad");
  const unsigned T = unsigned(ids.shape(0)), B = unsigned(ids.shape(1));
  Array<V> out({ids.shape(0), ids.shape(1), ids.shape(2)});
  std::fill(out.mutable_data(), out.mutable_data() + out.size(), V(0));
  gatherListedByNeuron(list, g.data(), T, B, unsigned(g.shape(1)), out.mutable_data());
  return std::move(out);
}

// float32 or float64, as `like`.
template <typename F> auto byDtype(const py::array &like, const char *name, F &&f) {
  if (py::isinstance<py::array_t<float>>(like))
    return f(float{});
  if (py::isinstance<py::array_t<double>>(like))
    return f(double{});
  throw std::invalid_argument(std::string(name) + " must be float32 or float64");
}

} // namespace

// setup.py builds this module once per instruction-set level, each under its own
// name (snn_ipu/_native.py picks one at import).
#ifndef SNN_IPU_MODULE_NAME
#define SNN_IPU_MODULE_NAME _C
#endif

PYBIND11_MODULE(SNN_IPU_MODULE_NAME, m) {
  m.doc() = "snn_ipu host executor: the IPU codelets run on CPU threads";
  tuneMalloc();
  py::register_exception<MemoryBudgetExceeded>(m, "MemoryBudgetExceeded", PyExc_MemoryError);
  m.def("layer_forward", &layerForward, py::arg("model"), py::arg("reset"),
        py::arg("surrogate_kind"), py::arg("surrogate_p0"), py::arg("surrogate_p1"),
        py::arg("grad_window"), py::arg("capacity"), py::arg("overflow"),
        py::arg("keep_dense_state"), py::arg("tile_starts"), py::arg("in_ids"),
        py::arg("in_counts"), py::arg("weight"), py::arg("bias"), py::arg("rec_weight"),
        py::arg("beta"), py::arg("threshold"), py::arg("alpha"), py::arg("num_threads") = 0,
        py::arg("input_currents") = FloatArray(py::ssize_t(0)), py::arg("check_lists") = true,
        py::arg("initial_membrane") = FloatArray(py::ssize_t(0)),
        py::arg("initial_syn") = FloatArray(py::ssize_t(0)),
        py::arg("initial_spikes") = FloatArray(py::ssize_t(0)),
        py::arg("return_state") = false, py::arg("sample_groups") = 1,
        py::arg("memory_budget") = 0);
  m.def("layer_backward", &layerBackward, py::arg("model"), py::arg("reset"),
        py::arg("surrogate_kind"), py::arg("surrogate_p0"), py::arg("surrogate_p1"),
        py::arg("grad_window"), py::arg("tile_starts"), py::arg("in_ids"),
        py::arg("in_counts"), py::arg("weight"), py::arg("has_bias"), py::arg("rec_weight"),
        py::arg("beta"), py::arg("threshold"), py::arg("alpha"), py::arg("out_ids"),
        py::arg("out_counts"), py::arg("membrane"), py::arg("dense_membrane"),
        py::arg("dense_syn"), py::arg("grad_out"), py::arg("needs"),
        py::arg("num_threads") = 0, py::arg("return_grad_current") = false,
        py::arg("check_lists") = true, py::arg("dropped_ids") = IntArray(py::ssize_t(0)),
        py::arg("dropped_counts") = IntArray(py::ssize_t(0)),
        py::arg("initial_membrane") = FloatArray(py::ssize_t(0)),
        py::arg("initial_syn") = FloatArray(py::ssize_t(0)),
        py::arg("initial_spike_ids") = IntArray(py::ssize_t(0)),
        py::arg("initial_spike_counts") = IntArray(py::ssize_t(0)),
        py::arg("initial_recurrent_cap") = 0, py::arg("sample_groups") = 1);
  m.def("spike_matmul", &spikeMatmul, py::arg("tile_starts"), py::arg("in_ids"),
        py::arg("in_counts"), py::arg("weight"), py::arg("num_threads") = 0,
        py::arg("sample_groups") = 1);
  m.def(
      "check_spike_list",
      [](const IntArray &ids, const IntArray &counts, unsigned numIds) {
        return checkWholeList(ids, counts, numIds, "input list");
      },
      py::arg("ids"), py::arg("counts"), py::arg("num_ids"),
      "Checks a list's counts and listed ids as the executor does; returns its spike total.");
  m.def(
      "spike_counts",
      [](const IntArray &ids, const IntArray &counts, const py::array &values, int numNeurons) {
        return byDtype(values, "values", [&](auto v) {
          return spikeCountsAs<decltype(v)>(ids, counts, values, numNeurons);
        });
      },
      py::arg("ids"), py::arg("counts"), py::arg("values"), py::arg("num_neurons"));
  m.def(
      "spike_counts_grad",
      [](const IntArray &ids, const IntArray &counts, const py::array &grad) {
        return byDtype(grad, "grad", [&](auto v) {
          return spikeCountsGradAs<decltype(v)>(ids, counts, grad);
        });
      },
      py::arg("ids"), py::arg("counts"), py::arg("grad"));
  m.def("hardware_threads", &hardwareThreads);
  registerPlanBindings(m);
}
