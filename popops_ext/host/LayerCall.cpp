#include "LayerCall.hpp"

#include <pybind11/stl.h>

namespace snn {

namespace {
template <typename T> using Class = py::class_<T>;
} // namespace

void registerLayerCallClasses(py::module_ &m) {
  Class<NeuronSettings>(m, "NeuronSettings")
      .def(py::init<>())
      .def_readwrite("model", &NeuronSettings::model)
      .def_readwrite("reset", &NeuronSettings::reset)
      .def_readwrite("surrogate", &NeuronSettings::surrogate)
      .def_readwrite("surrogate_param", &NeuronSettings::surrogateParam)
      .def_readwrite("surrogate_height", &NeuronSettings::surrogateHeight)
      .def_readwrite("grad_window", &NeuronSettings::gradWindow);

  Class<LayerCall>(m, "LayerCall")
      .def(py::init<>())
      .def_readwrite("neuron", &LayerCall::neuron)
      .def_readwrite("tile_starts", &LayerCall::tileStarts)
      .def_readwrite("sample_groups", &LayerCall::sampleGroups)
      .def_readwrite("num_threads", &LayerCall::numThreads)
      .def_readwrite("in_ids", &LayerCall::inIds)
      .def_readwrite("in_counts", &LayerCall::inCounts)
      .def_readwrite("in_capacity", &LayerCall::inCapacity)
      .def_readwrite("weight", &LayerCall::weight)
      .def_readwrite("bias", &LayerCall::bias)
      .def_readwrite("rec_weight", &LayerCall::recWeight)
      .def_readwrite("beta", &LayerCall::beta)
      .def_readwrite("threshold", &LayerCall::threshold)
      .def_readwrite("alpha", &LayerCall::alpha)
      .def_readwrite("initial_membrane", &LayerCall::initialMembrane)
      .def_readwrite("initial_synaptic", &LayerCall::initialSynaptic);

  Class<ForwardCall>(m, "ForwardCall")
      .def(py::init<>())
      .def_readwrite("layer", &ForwardCall::layer)
      .def_readwrite("capacity", &ForwardCall::capacity)
      .def_readwrite("overflow", &ForwardCall::overflow)
      .def_readwrite("keep_dense_state", &ForwardCall::keepDenseState)
      .def_readwrite("return_state", &ForwardCall::returnState)
      .def_readwrite("scan_input", &ForwardCall::scanInput)
      .def_readwrite("memory_budget", &ForwardCall::memoryBudget)
      .def_readwrite("input_currents", &ForwardCall::inputCurrents)
      .def_readwrite("initial_spikes", &ForwardCall::initialSpikes)
      .def_readwrite("copy_input", &ForwardCall::copyInput)
      .def_readwrite("dense_above", &ForwardCall::denseAbove);

  Class<GradNeeds>(m, "GradNeeds")
      .def(py::init<>())
      .def_readwrite("input", &GradNeeds::input)
      .def_readwrite("weight", &GradNeeds::weight)
      .def_readwrite("bias", &GradNeeds::bias)
      .def_readwrite("rec_weight", &GradNeeds::recWeight)
      .def_readwrite("beta", &GradNeeds::beta)
      .def_readwrite("threshold", &GradNeeds::threshold)
      .def_readwrite("alpha", &GradNeeds::alpha)
      .def_readwrite("current", &GradNeeds::current);

  Class<BackwardCall>(m, "BackwardCall")
      .def(py::init<>())
      .def_readwrite("layer", &BackwardCall::layer)
      .def_readwrite("out_ids", &BackwardCall::outIds)
      .def_readwrite("out_counts", &BackwardCall::outCounts)
      .def_readwrite("membrane", &BackwardCall::membrane)
      .def_readwrite("grad_out", &BackwardCall::gradOut)
      .def_readwrite("dense_membrane", &BackwardCall::denseMembrane)
      .def_readwrite("dense_synaptic", &BackwardCall::denseSynaptic)
      .def_readwrite("needs", &BackwardCall::needs)
      .def_readwrite("scan_lists", &BackwardCall::scanLists)
      .def_readwrite("dropped_ids", &BackwardCall::droppedIds)
      .def_readwrite("dropped_counts", &BackwardCall::droppedCounts)
      .def_readwrite("initial_spike_ids", &BackwardCall::initialSpikeIds)
      .def_readwrite("initial_spike_counts", &BackwardCall::initialSpikeCounts)
      .def_readwrite("initial_recurrent_cap", &BackwardCall::initialRecurrentCap);

  Class<ForwardResult>(m, "ForwardResult")
      .def_readonly("ids", &ForwardResult::ids)
      .def_readonly("counts", &ForwardResult::counts)
      .def_readonly("private_ids", &ForwardResult::privateIds)
      .def_readonly("private_counts", &ForwardResult::privateCounts)
      .def_readonly("private_spikes", &ForwardResult::privateSpikes)
      .def_readonly("membrane", &ForwardResult::membrane)
      .def_readonly("values", &ForwardResult::values)
      .def_readonly("dropped_ids", &ForwardResult::droppedIds)
      .def_readonly("dropped_counts", &ForwardResult::droppedCounts)
      .def_readonly("dense_membrane", &ForwardResult::denseMembrane)
      .def_readonly("dense_synaptic", &ForwardResult::denseSynaptic)
      .def_readonly("final_membrane", &ForwardResult::finalMembrane)
      .def_readonly("final_synaptic", &ForwardResult::finalSynaptic)
      .def_readonly("final_spikes", &ForwardResult::finalSpikes)
      .def_readonly("total_spikes", &ForwardResult::totalSpikes)
      .def_readonly("eligible_listed", &ForwardResult::eligibleListed)
      .def_readonly("spikes_dropped", &ForwardResult::spikesDropped)
      .def_readonly("eligible_dropped", &ForwardResult::eligibleDropped)
      .def_readonly("needed_capacity", &ForwardResult::neededCapacity)
      .def_readonly("overflow_at", &ForwardResult::overflowAt)
      .def_readonly("input_ids", &ForwardResult::inputIds)
      .def_readonly("input_counts", &ForwardResult::inputCounts)
      .def_readonly("input_spikes", &ForwardResult::inputSpikes)
      .def_readonly("wants_dense", &ForwardResult::wantsDense)
      .def_readonly("bucketed_steps", &ForwardResult::bucketedSteps);

  Class<BackwardResult>(m, "BackwardResult")
      .def_readonly("grad_in_values", &BackwardResult::gradInValues)
      .def_readonly("grad_weight", &BackwardResult::gradWeight)
      .def_readonly("grad_bias", &BackwardResult::gradBias)
      .def_readonly("grad_rec_weight", &BackwardResult::gradRecWeight)
      .def_readonly("grad_beta", &BackwardResult::gradBeta)
      .def_readonly("grad_threshold", &BackwardResult::gradThreshold)
      .def_readonly("grad_alpha", &BackwardResult::gradAlpha)
      .def_readonly("grad_current", &BackwardResult::gradCurrent)
      .def_readonly("bucketed_steps", &BackwardResult::bucketedSteps)
      .def_readonly("input_grad_bucketed_steps", &BackwardResult::inputGradBucketedSteps)
      .def_readonly("input_grad_walked_outputs", &BackwardResult::inputGradWalkedOutputs);
}

} // namespace snn
