// Python face of the planner: snn_ipu._C.plan_layer(...) -> dict.
#include "plan/PlanBindings.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>

#include "plan/Planner.hpp"

namespace py = pybind11;

namespace snn {

namespace {

plan::NeuronModel modelFromCode(int code) {
  if (code < 0 || code >= int(snn::kNumModels)) {
    std::string names;
    for (unsigned m = 0; m < snn::kNumModels; ++m)
      names += (m ? ", " : "") + std::to_string(m) + " (" + snn::CodeNames::models[m] + ")";
    throw std::invalid_argument("model must be one of " + names + ", got " +
                                std::to_string(code));
  }
  return plan::NeuronModel(unsigned(code));
}

py::dict memoryDict(const plan::TileMemory &m) {
  py::dict d;
  d["weights"] = m.weights;
  d["grad_weights"] = m.gradWeights;
  d["neuron_params"] = m.neuronParams;
  d["state"] = m.state;
  d["spike_buffers"] = m.spikeBuffers;
  d["grad_buffers"] = m.gradBuffers;
  d["history"] = m.history;
  d["combine"] = m.combine;
  d["reduce"] = m.reduce;
  d["io_share"] = m.ioShare;
  d["reserved"] = m.reserved;
  return d;
}

py::dict cyclesDict(const plan::StepCycles &c) {
  py::dict d;
  d["spike_matmul"] = c.spikeMatmul;
  d["state_update"] = c.stateUpdate;
  d["list_combine"] = c.listCombine;
  d["exchange_forward"] = c.exchangeForward;
  d["list_slice"] = c.listSlice;
  d["state_grad"] = c.stateGrad;
  d["weight_grad"] = c.weightGrad;
  d["input_grad"] = c.inputGrad;
  d["partial_reduce"] = c.partialReduce;
  d["exchange_backward"] = c.exchangeBackward;
  d["sync_forward"] = c.syncForward;
  d["sync_backward"] = c.syncBackward;
  d["step_ops_forward"] = c.stepOpsForward;
  d["step_ops_backward"] = c.stepOpsBackward;
  d["optimizer"] = c.optimizer;
  d["group_reduce"] = c.groupReduce;
  return d;
}

py::dict planDict(const plan::LayerPlan &p, const plan::Target &t) {
  py::dict d;
  d["target"] = p.target;
  d["in_features"] = p.spec.inFeatures;
  d["out_features"] = p.spec.outFeatures;
  d["batch"] = p.spec.batch;
  d["timesteps"] = p.spec.timesteps;
  d["recurrent"] = p.spec.recurrent;
  d["model"] = static_cast<int>(p.spec.model);
  d["capacity_in"] = p.spec.capacityIn;
  d["capacity_out"] = p.spec.capacityOut;
  d["activity"] = p.spec.activity;
  d["weight_bytes"] = p.spec.weightBytes;
  d["input_needs_grad"] = p.spec.inputNeedsGrad;
  d["num_tiles"] = p.numTiles;
  d["target_tiles"] = t.numTiles;
  d["threads"] = t.isIpu() ? 0u : t.parallelTiles;
  d["workers_per_tile"] = t.workersPerTile;
  py::array_t<std::int32_t> starts(static_cast<py::ssize_t>(p.tileStarts.size()));
  auto w = starts.mutable_unchecked<1>();
  for (py::ssize_t i = 0; i < w.shape(0); ++i)
    w(i) = static_cast<std::int32_t>(p.tileStarts[static_cast<std::size_t>(i)]);
  d["tile_starts"] = starts;
  d["sample_groups"] = p.sampleGroups;
  d["samples_per_group_max"] = p.samplesPerGroupMax;
  d["tiles_used"] = plan::tilesUsed(p);
  d["neurons_per_tile_max"] = p.neuronsPerTileMax;
  d["neurons_per_tile_min"] = p.neuronsPerTileMin;
  d["local_capacity"] = p.localCapacity;
  d["memory"] = memoryDict(p.maxTile);
  d["bytes_per_tile_max"] = p.bytesPerTileMax;
  d["bytes_per_tile_mean"] = p.bytesPerTileMean;
  d["bytes_total"] = p.bytesTotal;
  d["bytes_kept"] = p.bytesKept;
  d["bytes_budget"] = p.bytesBudget;
  d["bytes_reserved"] = t.reservedBytesPerTile;
  d["host_memory_budget"] = t.isIpu() ? 0 : t.totalMemoryBytes;
  d["exchange_bytes_forward"] = p.exchangeBytesForward;
  d["exchange_bytes_backward"] = p.exchangeBytesBackward;
  d["exchange_bytes_per_step"] = p.exchangeBytesForward + p.exchangeBytesBackward;
  d["cycles"] = cyclesDict(p.cycles);
  d["cycles_forward_timestep"] = p.cyclesForwardTimestep;
  d["cycles_backward_timestep"] = p.cyclesBackwardTimestep;
  d["cycles_training_step"] = p.cyclesTrainingStep;
  d["clock_hz"] = p.clockHz;
  d["sync_cycles"] = t.syncCycles;
  d["exchange_overhead_cycles"] = t.exchangeOverheadCycles;
  d["exchange_bytes_per_cycle"] = t.exchangeBytesPerCycle;
  d["seconds_per_training_step"] = p.secondsPerTrainingStep;
  d["samples_per_second"] = p.samplesPerSecond;
  d["fits"] = p.fits;
  d["reason"] = p.reason;
  d["ipus_needed"] = p.ipusNeeded;
  return d;
}


plan::LayerSpec checkedSpec(unsigned inFeatures, unsigned outFeatures, unsigned batch,
                           unsigned timesteps, bool recurrent, int model, unsigned capacityIn,
                           unsigned capacityOut, double activity, unsigned weightBytes,
                           bool denseHistory, bool linearInput, bool inputNeedsGrad,
                           std::initializer_list<std::pair<const char *, unsigned>> more) {
  // Sizes multiply into byte and element counts: beyond int32 they would wrap.
  for (const auto &[name, value] :
       {std::pair<const char *, unsigned>{"in_features", inFeatures},
        {"out_features", outFeatures}, {"batch", batch}, {"timesteps", timesteps},
        {"capacity_in", capacityIn}, {"capacity_out", capacityOut}})
    if (value > 0x7fffffffu)
      throw std::invalid_argument(std::string(name) + " must be below 2**31");
  for (const auto &[name, value] : more)
    if (value > 0x7fffffffu)
      throw std::invalid_argument(std::string(name) + " must be below 2**31");
  for (const auto &[name, value] :
       {std::pair<const char *, unsigned>{"in_features", inFeatures},
        {"out_features", outFeatures}, {"batch", batch}, {"timesteps", timesteps}})
    if (value == 0)
      throw std::invalid_argument(std::string(name) + " must be at least 1");
  if (weightBytes != 2 && weightBytes != 4)
    throw std::invalid_argument("weight_bytes must be 2 or 4");
  if (!(activity >= 0.0 && activity <= 1.0))
    throw std::invalid_argument("activity must lie in [0, 1]");
  plan::LayerSpec spec;
  spec.inFeatures = inFeatures;
  spec.outFeatures = outFeatures;
  spec.batch = batch;
  spec.timesteps = timesteps;
  spec.recurrent = recurrent;
  spec.model = modelFromCode(model);
  spec.capacityIn = capacityIn;
  spec.capacityOut = capacityOut;
  spec.activity = activity;
  spec.weightBytes = weightBytes;
  spec.denseHistory = denseHistory;
  spec.linearInput = linearInput;
  spec.inputNeedsGrad = inputNeedsGrad;
  return spec;
}

} // namespace

void registerPlanBindings(py::module_ &m) {
  m.def(
      "plan_layer",
      [](unsigned inFeatures, unsigned outFeatures, unsigned batch, unsigned timesteps,
         bool recurrent, int model, unsigned capacityIn, unsigned capacityOut, double activity,
         unsigned weightBytes, const std::string &target, unsigned threads, unsigned neuronsPerTile,
         bool denseHistory, unsigned sampleGroups, unsigned maxTiles, bool linearInput,
         bool inputNeedsGrad) {
        const plan::LayerSpec spec = checkedSpec(
            inFeatures, outFeatures, batch, timesteps, recurrent, model, capacityIn, capacityOut,
            activity, weightBytes, denseHistory, linearInput, inputNeedsGrad,
            {{"threads", threads}, {"neurons_per_tile", neuronsPerTile},
             {"sample_groups", sampleGroups}, {"max_tiles", maxTiles}});
        const plan::Target t = plan::targetByName(target, threads);
        if (sampleGroups > 1 && !t.isIpu())
          throw std::invalid_argument("sample_groups is chosen by the planner on the host");
        if (sampleGroups > 1 && !neuronsPerTile)
          throw std::invalid_argument("sample_groups needs neurons_per_tile");
        const plan::LayerPlan p =
            neuronsPerTile
                ? plan::planWithTileSize(spec, t, neuronsPerTile, std::max(1u, sampleGroups))
                : plan::planLayer(spec, t, maxTiles);
        return planDict(p, t);
      },
      py::arg("in_features"), py::arg("out_features"), py::arg("batch"), py::arg("timesteps"),
      py::arg("recurrent") = false, py::arg("model") = 0, py::arg("capacity_in") = 0,
      py::arg("capacity_out") = 0, py::arg("activity") = 0.05, py::arg("weight_bytes") = 4,
      py::arg("target") = "ipu2", py::arg("threads") = 0, py::arg("neurons_per_tile") = 0,
      py::arg("dense_history") = false, py::arg("sample_groups") = 1, py::arg("max_tiles") = 0,
      py::arg("linear_input") = false, py::arg("input_needs_grad") = true,
      "Places one layer on a target (\"ipu2\" or \"host\"): tile_starts, bytes per tile, exchange "
      "bytes and cycles per step, samples/s, and whether (and why not) it fits. capacity 0 = auto; "
      "neurons_per_tile 0 = let the planner choose (the tile size and, on an IPU, the sample "
      "groups, using at most max_tiles tiles, 0 = all). linear_input: the input list is the "
      "network's input, laid out linearly by PopART (its per-step slices cost more). "
      "input_needs_grad: false for a layer whose input nothing differentiates (the network's "
      "data): no input gradient, no reduction of its partials.");
  m.def(
      "plan_candidates",
      [](unsigned inFeatures, unsigned outFeatures, unsigned batch, unsigned timesteps,
         bool recurrent, int model, unsigned capacityIn, unsigned capacityOut, double activity,
         unsigned weightBytes, bool denseHistory, unsigned maxTiles, bool linearInput,
         bool inputNeedsGrad) {
        const plan::LayerSpec spec =
            checkedSpec(inFeatures, outFeatures, batch, timesteps, recurrent, model, capacityIn,
                        capacityOut, activity, weightBytes, denseHistory, linearInput,
                        inputNeedsGrad,
                        {{"max_tiles", maxTiles}});
        const plan::Target t = plan::ipu2Target();
        py::list out;
        for (const plan::LayerPlan &p : plan::planCandidates(spec, t, maxTiles))
          out.append(py::make_tuple(plan::tilesUsed(p), p.cyclesTrainingStep,
                                    p.neuronsPerTileMax, p.sampleGroups, p.bytesPerTileMax));
        return out;
      },
      py::arg("in_features"), py::arg("out_features"), py::arg("batch"), py::arg("timesteps"),
      py::arg("recurrent") = false, py::arg("model") = 0, py::arg("capacity_in") = 0,
      py::arg("capacity_out") = 0, py::arg("activity") = 0.05, py::arg("weight_bytes") = 4,
      py::arg("dense_history") = false, py::arg("max_tiles") = 0, py::arg("linear_input") = false,
      py::arg("input_needs_grad") = true,
      "ipu2: the fitting plans fastest for their tile count, fewest tiles first, as tuples "
      "(tiles used, cycles per training step, neurons per tile, sample groups, busiest tile bytes).");
}

} // namespace snn
