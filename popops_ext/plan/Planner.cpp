#include "plan/Planner.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace snn {
namespace plan {

namespace {

constexpr std::uint64_t kIdBytes = 4, kValueBytes = 4, kCountsBytes = 8;

std::uint64_t ceilDiv(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }
unsigned roundUp(unsigned x, unsigned grain) { return unsigned(ceilDiv(x, grain) * grain); }

std::string human(double bytes) {
  std::ostringstream os;
  os.precision(3);
  if (bytes >= 1024.0 * 1024.0)
    os << bytes / (1024.0 * 1024.0) << " MiB";
  else if (bytes >= 1024.0)
    os << bytes / 1024.0 << " KiB";
  else
    os << bytes << " B";
  return os.str();
}

// Expected per-sample counts that the cost model needs.
struct Activity {
  double spikesIn, listedIn, spikesOwn, listedOwn, listedOut;
};

Activity expectedActivity(const LayerSpec &s) {
  const double a = s.activity, e = 1.0 + kEligiblePerSpike;
  const bool readout = s.model == NeuronModel::Readout;
  Activity x;
  x.spikesIn = std::min<double>(s.capacityIn, a * s.inFeatures);
  x.listedIn = std::min<double>(s.capacityIn, e * a * s.inFeatures);
  x.spikesOwn = s.recurrent ? std::min<double>(s.capacityOut, a * s.outFeatures) : 0;
  x.listedOwn = s.recurrent ? std::min<double>(s.capacityOut, e * a * s.outFeatures) : 0;
  x.listedOut = readout ? 0 : std::min<double>(s.capacityOut, e * a * s.outFeatures);
  return x;
}

unsigned autoCapacity(double activity, unsigned features) {
  const double want =
      std::ceil(kAutoCapacityFactor * (1.0 + kEligiblePerSpike) * activity * features);
  return std::min<unsigned>(features, std::max<unsigned>(1, unsigned(want)));
}

// One sample's partial lists from all of the layer's tiles.
std::uint64_t gatheredListBytes(const LayerPlan &p) {
  const unsigned first = p.tileStarts[1] - p.tileStarts[0];
  const unsigned last = p.tileStarts[p.numTiles] - p.tileStarts[p.numTiles - 1];
  return localListBytes(p.spec, first) * (p.numTiles - 1) + localListBytes(p.spec, last);
}

// What the per-step popops operations of the graph cost (LayerGraph.cpp), as
// the graph report costs them: a sync, then the bytes on the busiest tile at
// the exchange's bytes per cycle. A dynamic slice or update of a [T, B, ...]
// tensor (spread slice by slice over the IPU, popops::createSliceableTensor)
// touches on a tile its share of one step and the step's copy beside it, plus
// the 4-byte step counter.
std::uint64_t sliceOpCycles(std::uint64_t stepElements, std::uint64_t elementBytes,
                            const Target &t) {
  const std::uint64_t perTile = std::max<std::uint64_t>(1, ceilDiv(stepElements, t.numTiles));
  return t.syncCycles + cost::ceilU((2.0 * perTile * elementBytes + 4) / t.exchangeBytesPerCycle);
}
// A slice of a step shifted by one (a zero step, mapped linearly at no less than
// 128 bytes a tile, in front of the [T, B, ...] tensor): the zero step is the
// representative slice.
std::uint64_t shiftedSliceOpCycles(std::uint64_t stepBytes, const Target &t) {
  const std::uint64_t perTile = std::max<std::uint64_t>(128, ceilDiv(stepBytes, t.numTiles));
  return t.syncCycles + cost::ceilU((2.0 * perTile + 4) / t.exchangeBytesPerCycle);
}
// A dynamic slice of a [T, B, ...] tensor mapped linearly over the IPU (the
// network's input, as PopART lays out a tensor no op created): its first step
// sits on the first tiles, up to a tile's share of the whole tensor (at least
// 128 bytes) on each.
std::uint64_t linearSliceOpCycles(std::uint64_t stepBytes, std::uint64_t totalBytes,
                                  const Target &t) {
  const std::uint64_t perTile = std::max<std::uint64_t>(128, ceilDiv(totalBytes, t.numTiles));
  return t.syncCycles +
         cost::ceilU((2.0 * std::min(perTile, stepBytes) + 4) / t.exchangeBytesPerCycle);
}
// An elementwise operation on `bytes` of one tile (zeroing a step's gradients,
// adding to them, the step counter).
std::uint64_t tileOpCycles(std::uint64_t bytes, const Target &t) {
  return t.syncCycles + cost::ceilU(bytes / t.exchangeBytesPerCycle);
}

void fillCycles(LayerPlan &p, const Target &t) {
  const LayerSpec &s = p.spec;
  const Activity act = expectedActivity(s);
  // A work item (IPU: a tile) runs its tile's neurons for its group's samples.
  const unsigned n = p.neuronsPerTileMax, W = t.workersPerTile, B = p.samplesPerGroupMax;
  const unsigned row = paddedRow(n); // what the row loops actually walk
  const bool floatW = s.weightBytes == 4;
  const unsigned vec = t.vectorWidth(s.weightBytes);
  const bool readout = s.model == NeuronModel::Readout;
  const std::uint64_t rec = s.recurrent ? 1 : 0;
  const double listedLocal = std::min<double>(p.localCapacity, act.listedOut * n / s.outFeatures);
  const unsigned combineSamples = unsigned(ceilDiv(B, p.numTiles));
  const std::uint64_t gathered = gatheredListBytes(p);

  StepCycles &c = p.cycles;
  const double spikes = act.spikesIn + act.spikesOwn;
  // IPU: SpikeMatmulParts (and a second for V's rows of the own spikes, a compute
  // set of its own); host: a SpikeMatmul per sample.
  c.spikeMatmul =
      t.isIpu() ? cost::spikeMatmulPartsCycles(B, act.spikesIn, row, floatW, vec, W) +
                      (rec ? cost::spikeMatmulPartsCycles(B, act.spikesOwn, row, floatW, vec, W)
                           : 0)
                : cost::spikeMatmulCycles(B, spikes, row, floatW, vec, W);
  c.stateUpdate = cost::stateUpdateCycles(s.model, B, n, listedLocal, W);
  // IPU: the combine compute set as LayerGraph builds it (the combines, of the
  // cheaper kind, and the tiles' spike bits); host: the combines.
  c.listCombine =
      readout     ? 0
      : t.isIpu() ? cost::combineSetCycles(combineSamples, B, p.numTiles, act.listedOut, n, W)
                  : cost::listCombineCycles(combineSamples, p.numTiles, act.listedOut, W);
  // A tile receives its group's samples' lists only.
  const std::uint64_t listsIn = B * (s.capacityIn * kIdBytes + kCountsBytes) +
                                rec * B * (s.capacityOut * kIdBytes + kCountsBytes);
  const std::uint64_t gatherIn = readout ? 0 : combineSamples * gathered;
  auto phase = [&](std::uint64_t bytes) {
    return cost::exchangeCycles(bytes, t.exchangeBytesPerCycle, t.syncCycles,
                                t.exchangeOverheadCycles);
  };
  // The gathers of a sample's pieces onto its combining tile: all but its own piece.
  const std::uint64_t others = p.numTiles > 1 ? p.numTiles - 1 : 0;
  if (t.isIpu()) {
    // The graph's exchange phases (ForwardPhases.cpp): the step's input slices
    // (and a recurrent layer's own list of t - 1) copied onto the tiles one copy
    // after another, one phase; the gather of the tiles' lists, another.
    c.exchangeForward =
        phase(B * s.capacityIn * kIdBytes + B * kCountsBytes +
              rec * B * (s.capacityOut * kIdBytes + 16)) +
        (readout ? 0 : phase(combineSamples * gathered * others / p.numTiles));
  } else {
    c.exchangeForward = phase(listsIn) + phase(gatherIn);
  }

  // TileListSlice (a tile's entries of the step's list) and SpikeBitsToList (the
  // spikes of t - 1, dropped ones included) per sample, in one compute set.
  c.listSlice = readout ? 0
                        : cost::computeSetCycles(2 * std::uint64_t(B),
                                                 std::max(cost::listSliceWorkerCycles(p.localCapacity),
                                                          cost::spikeBitsWorkerCycles(n)),
                                                 W);
  c.stateGrad = cost::stateGradCycles(s.model, B, n, listedLocal, W);
  // Weight gradients are accumulated in float whatever the weights' dtype. On an
  // IPU one WeightGradRows per tile (and one for V) takes all of the group's
  // samples in one compute set; the host runs a WeightGradScatter per sample.
  const std::uint64_t inGrad = s.inputNeedsGrad ? 1 : 0;
  c.weightGrad =
      t.isIpu() ? cost::weightGradRowsCycles(B, act.spikesIn, row, true, t.floatVectorWidth, W) +
                      (rec ? cost::weightGradRowsCycles(B, act.spikesOwn, row, false,
                                                        t.floatVectorWidth, W)
                           : 0)
                : cost::weightGradCycles(B, spikes, row, true, t.floatVectorWidth, W, 0);
  // The input gradient (and its reduction) only where something upstream needs it;
  // a recurrent layer's own list gradient always.
  const double listedGrad = (inGrad ? act.listedIn : 0.0) + act.listedOwn;
  // IPU: InputSpikeGradRange vertices (the input list's and the own list's in
  // compute sets of their own); host: an InputSpikeGrad per sample.
  if (t.isIpu())
    c.inputGrad =
        (inGrad ? cost::inputGradRangesCycles(B, act.listedIn, s.capacityIn, row, floatW, vec, W)
                : 0) +
        (rec ? cost::inputGradRangesCycles(B, act.listedOwn, s.capacityOut, row, floatW, vec, W)
             : 0);
  else
    c.inputGrad =
        inGrad || rec ? cost::inputGradCycles(B, listedGrad, row, floatW, vec, W) : 0;
  // IPU: PartialReduceRange vertices over the capacity's ranges (the input list's
  // and, recurrent, the own list's reductions are compute sets of their own);
  // host: one PartialReduce per sample.
  if (t.isIpu())
    c.partialReduce =
        (inGrad ? cost::partialReduceCycles(combineSamples, act.listedIn, s.capacityIn,
                                            p.numTiles, W)
                : 0) +
        (rec ? cost::partialReduceCycles(combineSamples, act.listedOwn, s.capacityOut, p.numTiles,
                                         W)
             : 0);
  else
    c.partialReduce =
        p.numTiles > 1 ? cost::computeSetCycles(
                             combineSamples, cost::partialReduceWorkerCycles(listedGrad, p.numTiles), W)
                       : 0;
  // Backward, each tile reads the step's combined output list with its
  // membranes and gradients and takes its own slice (readout: dense dL/dU).
  const std::uint64_t gradOut =
      readout ? B * n * kValueBytes
              : B * (s.capacityOut * (kIdBytes + 2 * kValueBytes) + kCountsBytes);
  const std::uint64_t reduceIn =
      p.numTiles > 1 ? ceilDiv(B * (inGrad * s.capacityIn + rec * s.capacityOut), p.numTiles) *
                           p.numTiles * kValueBytes
                     : 0;
  const bool denseU = readout || s.denseHistory;
  if (t.isIpu()) {
    const std::uint64_t K = s.capacityOut, Kin = s.capacityIn;
    // The step's slices are all cut first and then copied one after another
    // (BackwardPhases.cpp, exchangeGradInputs): one phase, which the copy of
    // dL/d(values)[t] (readout: dL/dU[t]) joins unless the recurrent gradient's
    // compute sets come between; then the gathers of the partials.
    std::uint64_t first = B * Kin * kIdBytes + B * kCountsBytes;
    if (!readout)
      first += B * K * kIdBytes + B * kCountsBytes + B * K * kValueBytes +
               B * ceilDiv(n, 16) * kValueBytes + rec * (B * K * kIdBytes + B * kCountsBytes);
    if (denseU)
      first += stateVarsPerNeuron(s.model) * B * n * kValueBytes;
    const std::uint64_t gradT = readout ? B * n * kValueBytes : B * K * kValueBytes;
    std::uint64_t b = rec ? phase(first) + phase(combineSamples * others * K * kValueBytes) +
                                phase(gradT)
                          : phase(first + gradT);
    b += phase(inGrad * combineSamples * others * Kin * kValueBytes);
    c.exchangeBackward = b;
  } else {
    c.exchangeBackward = phase(listsIn + gradOut) + phase(reduceIn);
  }
  const std::uint64_t fanIn = s.inFeatures + rec * s.outFeatures;
  c.optimizer = cost::optimizerCycles(std::uint64_t(row) * fanIn, vec, W);

  if (t.isIpu()) {
    // Compute sets per step, as LayerGraph builds them: forward spike matmul,
    // (recurrent matmul), state update, (combine); backward (recurrent input grad
    // and reduce), (list slice), state grad, weight grad, (input grad and its reduce).
    const std::uint64_t setsForward = 2 + rec + (readout ? 0 : 1);
    const std::uint64_t setsBackward = 2 + 2 * inGrad + 2 * rec + (readout ? 0 : 1);
    c.syncForward = setsForward * t.syncCycles;
    c.syncBackward = setsBackward * t.syncCycles;
    // The per-step popops operations (LayerGraph.cpp), in the graph report's costs.
    const std::uint64_t Bt = s.batch, kin = s.capacityIn, kout = s.capacityOut, N = s.outFeatures;
    const std::uint64_t words = std::uint64_t(p.numTiles) * ceilDiv(n, 16);
    const std::uint64_t denseVars = s.denseHistory ? stateVarsPerNeuron(s.model) : 0;
    const std::uint64_t counter = tileOpCycles(8, t); // t += 1 (the counter and a constant)
    // the step's input list (ids, counts)
    const std::uint64_t inputSlices =
        s.linearInput ? linearSliceOpCycles(Bt * kin * 4, s.timesteps * Bt * kin * 4, t) +
                            linearSliceOpCycles(Bt * 8, s.timesteps * Bt * 8, t)
                      : sliceOpCycles(Bt * kin, 4, t) + sliceOpCycles(Bt * 2, 4, t);
    std::uint64_t f = inputSlices + counter;
    if (readout)
      f += sliceOpCycles(Bt * N, 4, t);
    else // ids, membranes, counts and needed, spike bits of the step; the dense state
      f += 2 * sliceOpCycles(Bt * kout, 4, t) + sliceOpCycles(Bt * 4, 4, t) +
           sliceOpCycles(Bt * words, 4, t) + denseVars * sliceOpCycles(Bt * N, 4, t);
    c.stepOpsForward = f;
    // inputs of step t, dL/d(values)[t] (readout: dL/dU[t]), gradIn[t] zeroed on the
    // combining tiles and written back, the counter
    std::uint64_t b = inputSlices + sliceOpCycles(Bt * (readout ? N : kout), 4, t) +
                      inGrad * (tileOpCycles(combineSamples * kin * kValueBytes, t) +
                                sliceOpCycles(Bt * kin, 4, t)) +
                      counter;
    if (!readout) // ids, counts, membranes of step t; spike bits of t - 1
      b += 2 * sliceOpCycles(Bt * kout, 4, t) + sliceOpCycles(Bt * 2, 4, t) +
           shiftedSliceOpCycles(Bt * words * 4, t);
    if (denseU)
      b += stateVarsPerNeuron(s.model) * shiftedSliceOpCycles(Bt * N * 4, t);
    // recurrent: the list of t - 1; its gradient zeroed, then added to dL/d(values)[t]
    b += rec * (shiftedSliceOpCycles(Bt * kout * 4, t) + shiftedSliceOpCycles(Bt * 2 * 4, t) +
                tileOpCycles(combineSamples * kout * kValueBytes, t) +
                sliceOpCycles(Bt * kout, 4, t));
    c.stepOpsBackward = b;
    // Once per step: every tile receives its weight rows (each group its own
    // copy), and with several groups each tile reduces 1/G of its block from
    // the other groups' copies (receive, then add in float vectors).
    const std::uint64_t block = std::uint64_t(row) * fanIn;
    c.groupReduce = cost::exchangeCycles(block * s.weightBytes, t.exchangeBytesPerCycle,
                                         t.syncCycles, t.exchangeOverheadCycles);
    if (p.sampleGroups > 1) {
      const std::uint64_t others = ceilDiv(block * (p.sampleGroups - 1), p.sampleGroups);
      c.groupReduce +=
          cost::exchangeCycles(others * kValueBytes, t.exchangeBytesPerCycle, t.syncCycles,
                                         t.exchangeOverheadCycles) +
          t.syncCycles +
          cost::vertexCycles(cost::kWorkerEntryCycles + ceilDiv(ceilDiv(others, W), t.floatVectorWidth),
                             W);
    }
  }

  // Work items beyond the ones that run at once (host threads) run in waves.
  const std::uint64_t waves =
      ceilDiv(std::uint64_t(p.numTiles) * p.sampleGroups, t.parallelTiles);
  p.cyclesForwardTimestep = waves * (c.spikeMatmul + c.stateUpdate + c.listCombine +
                                     c.exchangeForward + c.syncForward + c.stepOpsForward);
  p.cyclesBackwardTimestep =
      waves * (c.listSlice + c.stateGrad + c.weightGrad + c.inputGrad + c.partialReduce +
               c.exchangeBackward + c.syncBackward + c.stepOpsBackward);
  p.cyclesTrainingStep =
      std::uint64_t(s.timesteps) * (p.cyclesForwardTimestep + p.cyclesBackwardTimestep) +
      waves * c.optimizer + c.groupReduce;
  p.clockHz = t.clockHz;
  p.secondsPerTrainingStep = p.cyclesTrainingStep / t.clockHz;
  p.samplesPerSecond = p.secondsPerTrainingStep > 0 ? s.batch / p.secondsPerTrainingStep : 0;

  const std::uint64_t copies = t.isIpu() ? p.sampleGroups : 1;
  p.exchangeBytesForward = copies * (p.numTiles * listsIn + (readout ? 0 : B * gathered));
  p.exchangeBytesBackward =
      copies * (p.numTiles * listsIn +
                (readout ? B * s.outFeatures * kValueBytes : p.numTiles * gradOut) +
                (p.numTiles > 1
                     ? B * (inGrad * s.capacityIn + rec * s.capacityOut) * p.numTiles * kValueBytes
                     : 0));
}

void fillMemory(LayerPlan &p, const Target &t) {
  // On an IPU a tile holds its group's samples only; the op's [T, B, ...]
  // tensors (ioShare) are the whole batch's, spread over the IPU.
  LayerSpec s = p.spec;
  if (t.isIpu())
    s.batch = p.samplesPerGroupMax;
  const unsigned first = p.tileStarts[1] - p.tileStarts[0];
  const unsigned last = p.tileStarts[p.numTiles] - p.tileStarts[p.numTiles - 1];
  const std::uint64_t gathered = gatheredListBytes(p);
  const std::uint64_t rec = s.recurrent ? 1 : 0;
  const std::uint64_t reduceOutputs =
      std::uint64_t(s.batch) * ((s.inputNeedsGrad ? s.capacityIn : 0) + rec * s.capacityOut);

  // On an IPU the op's tensors are spread over every tile of the chip.
  const unsigned used = t.isIpu() ? p.numTiles * p.sampleGroups : p.numTiles;
  p.ioTiles = t.isIpu() ? std::max(used, t.numTiles) : p.numTiles;
  p.bytesIoTotal = ioBytes(p.spec);
  const std::uint64_t ioShare = ceilDiv(p.bytesIoTotal, p.ioTiles);

  // Sample b's lists are combined on tile b % numTiles and output o's partial
  // gradients reduced on tile o / ceil(outputs / numTiles): tile 0 does most.
  TileRole role0{first,
                 p.numTiles,
                 unsigned(ceilDiv(s.batch, p.numTiles)),
                 gathered,
                 ceilDiv(reduceOutputs, p.numTiles),
                 p.ioTiles};
  p.maxTile = tileMemory(s, role0, t.reservedBytesPerTile);
  p.maxTile.ioShare = ioShare;
  if (t.isIpu() && p.sampleGroups > 1) // the groups' weight gradients, summed over the IPU
    p.maxTile.reduce += ceilDiv(std::uint64_t(s.outFeatures) *
                                    (s.inFeatures + (s.recurrent ? s.outFeatures : 0)) * kValueBytes,
                                p.ioTiles);
  p.bytesPerTileMax = p.maxTile.total();

  // Sum over tiles: everything but combining and reducing scales with neurons.
  const TileMemory full =
      tileMemory(s, TileRole{first, p.numTiles, 0, gathered, 0, p.ioTiles}, t.reservedBytesPerTile);
  const TileMemory tail =
      tileMemory(s, TileRole{last, p.numTiles, 0, gathered, 0, p.ioTiles}, t.reservedBytesPerTile);
  const bool readout = s.model == NeuronModel::Readout;
  const std::uint64_t onLayerTiles =
      full.total() * (p.numTiles - 1) + tail.total() +
      (readout ? 0 : std::uint64_t(s.batch) * gathered) +
      (p.numTiles > 1 ? reduceOutputs * p.numTiles * kValueBytes : 0);
  // (IPU: every group's tiles alike; their io shares counted once, below)
  const std::uint64_t groups = t.isIpu() ? p.sampleGroups : 1;
  const std::uint64_t ownIo = std::uint64_t(full.ioShare) * (p.numTiles - 1) + tail.ioShare;
  const std::uint64_t onGroupTiles = onLayerTiles - ownIo;
  p.bytesPerTileMean = double(onGroupTiles) / p.numTiles + double(ioShare);
  p.bytesTotal = groups * onGroupTiles + (t.isIpu() ? p.bytesIoTotal : ownIo +
                                          full.ioShare * (p.ioTiles - p.numTiles));
  const auto kept = [](const TileMemory &m) {
    return m.weights + m.gradWeights + m.neuronParams + m.history;
  };
  p.bytesKept = groups * (kept(full) * (p.numTiles - 1) + kept(tail)) + p.bytesIoTotal;
  p.bytesBudget = t.bytesPerTile;
}

// IPU: what a tile of `neurons` neurons (at most the layer's) holds of its own for this
// plan's samples, however many tiles (or IPUs) the layer is split over: not its share of
// the op's tensors over T (spread over all tiles), nor what tile 0 holds for the others
// (the partial lists it combines, the partial gradients it reduces).
TileMemory ownShare(const LayerPlan &p, const Target &t, unsigned neurons) {
  LayerSpec s = p.spec;
  s.batch = p.samplesPerGroupMax;
  neurons = std::max(1u, std::min(s.outFeatures, neurons));
  const unsigned tiles = unsigned(ceilDiv(s.outFeatures, neurons));
  TileMemory m = tileMemory(s, TileRole{neurons, tiles, 0, 0, 0, tiles}, t.reservedBytesPerTile);
  m.ioShare = m.combine = m.reduce = 0;
  return m;
}

// IPU: the least a tile of the layer holds: the fewest neurons a tile takes (a grain, or
// the whole layer where it is smaller).
TileMemory smallestShare(const LayerPlan &p, const Target &t) {
  return ownShare(p, t, std::max(1u, t.neuronGrain));
}

// The largest v in [lo, hi] for which fits(v) holds, fits being true up to some value and
// false above it; 0 when fits(lo) does not hold.
template <class Fits> unsigned largestFitting(unsigned lo, unsigned hi, Fits fits) {
  if (lo > hi || !fits(lo))
    return 0;
  while (lo < hi) {
    const unsigned mid = lo + (hi - lo + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// IPU: the most neurons (whole grains, or the whole layer) a tile can take and still hold
// its own share (ownShare); 0 where not even a grain's fits.
unsigned widestOwnShare(const LayerPlan &p, const Target &t) {
  const unsigned grain = std::max(1u, t.neuronGrain);
  const unsigned grains = unsigned(ceilDiv(p.spec.outFeatures, grain));
  const unsigned k = largestFitting(
      1, grains, [&](unsigned k) { return ownShare(p, t, k * grain).total() <= t.bytesPerTile; });
  return std::min(k * grain, p.spec.outFeatures);
}

// Tile boundaries of `out` neurons in tiles of `neuronsPerTile` (the last takes the rest).
std::vector<unsigned> chunkStarts(unsigned out, unsigned neuronsPerTile) {
  const unsigned chunk = std::max(1u, std::min(neuronsPerTile, out));
  const unsigned numTiles = unsigned(ceilDiv(out, chunk));
  std::vector<unsigned> starts(numTiles + 1);
  for (unsigned i = 0; i <= numTiles; ++i)
    starts[i] = std::min<unsigned>(out, i * chunk);
  return starts;
}

// `p` (its spec and target set) on the tiles of `starts` (widest first, narrowest last) in
// `sampleGroups` groups, and the memory that takes.
void placeTiles(LayerPlan &p, const Target &t, std::vector<unsigned> starts,
                unsigned sampleGroups) {
  p.sampleGroups = sampleGroups;
  p.samplesPerGroupMax = unsigned(ceilDiv(p.spec.batch, sampleGroups));
  p.numTiles = unsigned(starts.size() - 1);
  p.tileStarts = std::move(starts);
  p.neuronsPerTileMax = p.tileStarts[1] - p.tileStarts[0];
  p.neuronsPerTileMin = p.tileStarts[p.numTiles] - p.tileStarts[p.numTiles - 1];
  p.localCapacity = localCapacity(p.spec, p.neuronsPerTileMax);
  fillMemory(p, t);
}

// The memory of a plan of `s` (its capacities clamped as resolveSpec clamps them) on tiles
// of `neurons` neurons in `sampleGroups` groups, as planWithTileSize places them: what the
// reasons weigh a change against.
LayerPlan memoryPlan(LayerSpec s, const Target &t, unsigned neurons, unsigned sampleGroups) {
  s.capacityIn = std::min(s.capacityIn, s.inFeatures);
  s.capacityOut = s.model == NeuronModel::Readout ? 0 : std::min(s.capacityOut, s.outFeatures);
  LayerPlan q;
  q.spec = s;
  q.target = t.name;
  placeTiles(q, t, chunkStarts(s.outFeatures, neurons),
             std::max(1u, std::min(sampleGroups, s.batch)));
  return q;
}

// IPU: why a layer whose tiles' own shares fit on this IPU's tiles still does not: what
// tile 0 holds for the others (the partial lists it gathers and combines, the partial
// gradients it reduces) and its share of the op's tensors. Where the plan's tiles are
// wider than a tile's own share allows (planLayer found the narrower ones' tile 0 larger
// still, or the tile size was given), the tiles of `widest` neurons are the ones
// described. The changes named are those that, each alone, make tile 0 of those tiles fit.
std::string tileZeroReason(const LayerPlan &p, const Target &t, unsigned widest) {
  const LayerSpec &s = p.spec;
  const bool readout = s.model == NeuronModel::Readout;
  const bool own = p.neuronsPerTileMax <= widest;
  const LayerPlan q = memoryPlan(s, t, own ? p.neuronsPerTileMax : widest, p.sampleGroups);
  const TileMemory &m = q.maxTile;
  const TileMemory mine = ownShare(q, t, q.neuronsPerTileMax);
  std::ostringstream os;
  if (own)
    os << "Each tile's own share fits (" << q.neuronsPerTileMax << " neurons: "
       << human(double(mine.total())) << ", of it "
       << human(double(mine.weights + mine.gradWeights))
       << " weight rows and their gradients), but tile 0 also ";
  else
    os << "Tiles of up to " << widest << " neurons (" << q.numTiles
       << " tiles) would hold their own share (" << human(double(mine.total()))
       << "), but tile 0 would then need " << human(double(m.total())) << ": it also ";
  // Largest first: what tile 0 holds beyond its own share.
  std::vector<std::pair<std::uint64_t, std::string>> extras;
  const unsigned combineSamples = unsigned(ceilDiv(q.samplesPerGroupMax, q.numTiles));
  if (m.combine) {
    std::ostringstream e;
    e << "combines the spike lists of " << combineSamples << " of the "
      << q.samplesPerGroupMax << " samples, gathering for each the partial lists of all "
      << q.numTiles << " tiles (up to 2 x " << q.localCapacity
      << " entries of 8 bytes and 8 bytes of counts from each tile: "
      << human(double(m.combine)) << ")";
    extras.emplace_back(m.combine, e.str());
  }
  if (m.reduce)
    extras.emplace_back(m.reduce, "reduces partial gradients gathered from the tiles (" +
                                      human(double(m.reduce)) + ")");
  if (m.ioShare)
    extras.emplace_back(m.ioShare, "holds, as every tile of the IPU does, its share of the "
                                   "op's tensors over T (" +
                                       human(double(m.ioShare)) + ")");
  std::stable_sort(extras.begin(), extras.end(),
                   [](const auto &a, const auto &b) { return a.first > b.first; });
  for (std::size_t i = 0; i < extras.size(); ++i)
    os << (i == 0 ? "" : i + 1 == extras.size() ? " and " : ", ") << extras[i].second;
  os << ". ";
  const bool gatherFirst = m.combine >= m.reduce && m.combine >= m.ioShare;
  if (gatherFirst && combineSamples == 1)
    os << "More tiles (or IPUs) would not shrink that gather: it takes a piece from every "
          "tile. ";
  // What, each alone, makes tile 0 of these tiles fit.
  auto fitsWith = [&](const LayerSpec &x) {
    return memoryPlan(x, t, q.neuronsPerTileMax, q.sampleGroups).bytesPerTileMax <=
           t.bytesPerTile;
  };
  auto largest = [&](unsigned now, auto set) {
    return now > 1 ? largestFitting(1, now - 1, [&](unsigned v) {
      LayerSpec x = s;
      set(x, v);
      return fitsWith(x);
    })
                   : 0u;
  };
  std::vector<std::string> fixes;
  if (s.weightBytes == 4) {
    LayerSpec x = s;
    x.weightBytes = 2;
    if (fitsWith(x))
      fixes.push_back("use half weights (weight_bytes=2)");
  }
  if (!readout)
    if (unsigned k = largest(s.capacityOut, [](LayerSpec &x, unsigned v) { x.capacityOut = v; }))
      fixes.push_back("max_spikes of at most " + std::to_string(k) + " (capacity_out=" +
                      std::to_string(s.capacityOut) + "; a tile sends up to min(capacity_out, " +
                      std::to_string(q.neuronsPerTileMax) + " neurons) entries of each list)");
  if (unsigned k = largest(s.capacityIn, [](LayerSpec &x, unsigned v) { x.capacityIn = v; }))
    fixes.push_back("the input's max_spikes of at most " + std::to_string(k) +
                    " (capacity_in=" + std::to_string(s.capacityIn) + ")");
  if (unsigned b = largest(s.batch, [](LayerSpec &x, unsigned v) { x.batch = v; }))
    fixes.push_back("a batch of at most " + std::to_string(b) + " (now " +
                    std::to_string(s.batch) + ")");
  if (unsigned n = largest(s.timesteps, [](LayerSpec &x, unsigned v) { x.timesteps = v; }))
    fixes.push_back("shorten T to at most " + std::to_string(n) + " steps (now " +
                    std::to_string(s.timesteps) + ")");
  if (unsigned o = largest(s.outFeatures, [](LayerSpec &x, unsigned v) { x.outFeatures = v; }))
    fixes.push_back("at most " + std::to_string(o) + " output neurons (out_features=" +
                    std::to_string(s.outFeatures) +
                    (gatherFirst ? ", fewer tiles to gather from)" : ")"));
  if (unsigned i = largest(s.inFeatures, [](LayerSpec &x, unsigned v) { x.inFeatures = v; }))
    fixes.push_back("at most " + std::to_string(i) + " inputs (in_features=" +
                    std::to_string(s.inFeatures) + ", shorter weight rows)");
  if (fixes.empty()) {
    os << "No one change alone makes tile 0 fit: lower several of max_spikes (capacity_in="
       << s.capacityIn << ", capacity_out=" << s.capacityOut << "), the batch (" << s.batch
       << ") and the layer's inputs and outputs together";
  } else {
    os << "To fit, on tiles of " << q.neuronsPerTileMax << " neurons, any one of: ";
    for (std::size_t i = 0; i < fixes.size(); ++i)
      os << (i ? "; or " : "") << fixes[i];
  }
  return os.str();
}

// IPU: whether half weights alone let the layer fit: every tile's own share on tiles this
// IPU has, and tile 0 of the widest such tiles.
bool halfWeightsFit(const LayerPlan &p, const Target &t) {
  LayerPlan h = p;
  h.spec.weightBytes = 2;
  const unsigned w = widestOwnShare(h, t);
  return w > 0 && ceilDiv(h.spec.outFeatures, w) * h.sampleGroups <= t.numTiles &&
         memoryPlan(h.spec, t, w, h.sampleGroups).bytesPerTileMax <= t.bytesPerTile;
}

// `widest`: widestOwnShare(p, t) (IPU).
std::string notFitReason(const LayerPlan &p, const Target &t, unsigned widest) {
  const LayerSpec &s = p.spec;
  const TileMemory &m = p.maxTile;
  std::ostringstream os;
  if (!t.isIpu()) {
    os << "needs " << human(double(p.bytesTotal)) << " of host memory, more than the "
       << human(double(t.totalMemoryBytes)) << " allowed; use a smaller batch, shorter T, "
       << "smaller max_spikes or half weights";
    return os.str();
  }
  os << "needs " << human(double(p.bytesPerTileMax)) << " on its busiest tile ("
     << p.neuronsPerTileMax << " neurons on each of " << p.numTiles << " tiles) but a tile has "
     << human(double(t.bytesPerTile)) << " (" << human(double(t.reservedBytesPerTile))
     << " of it reserved for code). ";
  // Where this IPU has the tiles for every tile's own share (tiles of the most neurons
  // that hold theirs, widest), what does not fit is what tile 0 holds for the others.
  if (widest > 0 && ceilDiv(s.outFeatures, widest) * p.sampleGroups <= t.numTiles)
    return os.str() + tileZeroReason(p, t, widest);
  struct Part {
    const char *what;
    std::uint64_t bytes;
  };
  const Part parts[] = {
      {"weights and their gradients", m.weights + m.gradWeights},
      // the op's [T, B, K] inputs, outputs and grads are history too
      {"BPTT history over T", m.history + m.ioShare},
      {"spike lists and exchange buffers", m.spikeBuffers + m.gradBuffers + m.combine + m.reduce},
      {"neuron state", m.state + m.neuronParams}};
  const Part *top =
      std::max_element(std::begin(parts), std::end(parts),
                       [](const Part &a, const Part &b) { return a.bytes < b.bytes; });
  os << "Largest share: " << top->what << " (" << human(double(top->bytes)) << "). To fit: ";
  const std::string top0 = top->what;
  // A readout emits no list: only the input's capacity matters.
  std::ostringstream caps;
  if (s.model == NeuronModel::Readout)
    caps << "the input's max_spikes (capacity_in=" << s.capacityIn << ")";
  else
    caps << "max_spikes (capacity_in=" << s.capacityIn << ", capacity_out=" << s.capacityOut << ")";
  const std::string capacities = caps.str();
  // More IPUs give a tile fewer neurons and a smaller share of the op's tensors; where
  // even the smallest share does not fit, only what shrinks that share helps.
  const TileMemory least = smallestShare(p, t);
  if (least.total() > t.bytesPerTile) {
    std::vector<Part> leastParts = {
        {"weights and their gradients", least.weights + least.gradWeights},
        {"BPTT history over T", least.history},
        {"spike lists and exchange buffers", least.spikeBuffers + least.gradBuffers},
        {"neuron state", least.state + least.neuronParams}};
    std::stable_sort(leastParts.begin(), leastParts.end(),
                     [](const Part &a, const Part &b) { return a.bytes > b.bytes; });
    // What to shrink: the largest parts, until the rest would fit.
    std::uint64_t rest = least.total();
    std::vector<std::string> fixes;
    std::ostringstream shares;
    for (const Part &part : leastParts) {
      if (rest <= t.bytesPerTile || part.bytes == 0)
        break;
      const std::string what = part.what;
      std::ostringstream fix;
      if (what == "weights and their gradients") {
        // half weights halve W, not its float gradient: named only where that is enough
        if (s.weightBytes == 4 && rest - least.weights / 2 <= t.bytesPerTile)
          fix << "use half weights (weight_bytes=2) or ";
        fix << "fewer inputs (in_features=" << s.inFeatures;
        if (s.recurrent)
          fix << ", and out_features=" << s.outFeatures << " of the recurrent rows";
        fix << "; the input features would have to be split across tiles, not supported)";
      } else if (what == "BPTT history over T") {
        fix << "shorten T (" << s.timesteps << ") or lower the batch (" << s.batch << ")";
      } else if (what == "spike lists and exchange buffers") {
        fix << "lower " << capacities << " or the batch (" << s.batch << ")";
      } else {
        fix << "lower the batch (" << s.batch << ")";
      }
      fixes.push_back(fix.str());
      shares << (fixes.size() > 1 ? ", " : "") << part.what << " "
             << human(double(part.bytes));
      rest -= part.bytes;
    }
    for (std::size_t i = 0; i < fixes.size(); ++i)
      os << (i ? ", and " : "") << fixes[i];
    os << "; more IPUs would not help: a tile of "
       << std::min(s.outFeatures, std::max(1u, t.neuronGrain))
       << " neurons, the fewest it takes, still needs " << human(double(least.total())) << " ("
       << shares.str() << ") for its " << p.samplesPerGroupMax << " samples";
    return os.str();
  }
  // Tiles narrow enough for their own share are more than this IPU has: how many IPUs'
  // tiles they would take, at least (tile 0's gather of their lists comes on top), and
  // that a layer is not split across IPUs here.
  const std::uint64_t tilesForOwn = ceilDiv(s.outFeatures, widest) * p.sampleGroups;
  std::ostringstream more;
  more << ". Tiles of at most " << widest << " neurons would hold their own share ("
       << human(double(ownShare(p, t, widest).total()))
       << " each, before tile 0's gather of their lists), but the layer would then take "
       << tilesForOwn << " tiles"
       << (p.sampleGroups > 1 ? " (" + std::to_string(p.sampleGroups) + " sample groups)" : "")
       << ", at least " << p.ipusNeeded << " IPUs"
       << (p.ipusNeeded > ceilDiv(tilesForOwn, t.numTiles) ? " by the layer's bytes" : "")
       << ", and snn_ipu places a layer on one IPU: it cannot split one across IPUs";
  if (top0 == "weights and their gradients") {
    // half weights halve W, not its float gradient: named only where that is enough
    if (s.weightBytes == 4 && halfWeightsFit(p, t))
      os << "use half weights (weight_bytes=2) or ";
    os << "fewer neurons (in_features=" << s.inFeatures << ", out_features=" << s.outFeatures
       << (s.recurrent ? ", recurrent" : "") << ")";
  } else if (top0 == "BPTT history over T") {
    os << "shorten T (" << s.timesteps << "), lower " << capacities << " or the batch (" << s.batch
       << ")";
  } else if (top0 == "spike lists and exchange buffers") {
    // a step's lists and buffers: T does not change them
    os << "lower " << capacities << " or the batch (" << s.batch << ")";
  } else {
    os << "a smaller batch (" << s.batch << ") or fewer neurons";
  }
  os << more.str();
  return os.str();
}

void judge(LayerPlan &p, const Target &t) {
  unsigned widest = 0;
  if (t.isIpu()) {
    const std::uint64_t usable = t.bytesPerTile - t.reservedBytesPerTile;
    const std::uint64_t data = p.bytesTotal - std::uint64_t(p.numTiles) * t.reservedBytesPerTile;
    p.fits = p.bytesPerTileMax <= t.bytesPerTile;
    // At least the layer's bytes over an IPU's, and at least the IPUs whose tiles, each of
    // the most neurons that holds its own share, the layer would take (none where not
    // even a grain's share fits: no number of IPUs does).
    const std::uint64_t byBytes = std::max<std::uint64_t>(1, ceilDiv(data, usable * t.numTiles));
    widest = p.fits ? 0 : widestOwnShare(p, t);
    const std::uint64_t byTiles =
        widest ? ceilDiv(ceilDiv(p.spec.outFeatures, widest) * p.sampleGroups, t.numTiles) : 0;
    p.ipusNeeded = unsigned(std::max(byBytes, byTiles));
  } else {
    p.ipusNeeded = 0;
    p.fits = p.bytesTotal <= t.totalMemoryBytes;
  }
  p.reason = p.fits ? "" : notFitReason(p, t, widest);
}

} // namespace

// The estimates count bytes and cycles in uint64. Their largest products are the op's
// tensors over T (T x B x the entries of a step) and the cycles of the dense worst case
// (T x B x fan-in x neurons, at most 16 cycles each with the vertices' overheads);
// sizes whose bound passes 2^63 are refused here, computed in long double, so that no
// count wraps around (batch x timesteps near 2^50 did).
static void checkCountsFit(const LayerSpec &s) {
  const long double T = s.timesteps, B = s.batch, out = s.outFeatures;
  const long double fanIn = (long double)s.inFeatures + (s.recurrent ? out : 0.0L);
  const long double entries = fanIn + out + s.capacityIn + s.capacityOut + 64.0L;
  const long double bytes = T * B * entries * 64.0L + (fanIn + 64.0L) * (out + 64.0L) * 64.0L;
  const long double cycles = T * B * (fanIn + 64.0L) * (out + 64.0L) * 16.0L;
  const long double limit = 9223372036854775808.0L; // 2^63
  if (bytes >= limit || cycles >= limit) {
    std::ostringstream os;
    os << "plan: batch " << s.batch << " x timesteps " << s.timesteps << " on a layer of "
       << s.inFeatures << "->" << s.outFeatures
       << " is too large to count: its bytes or cycles could pass 2**63 (about "
       << double(std::max(bytes, cycles)) << "); plan a smaller batch, fewer timesteps or "
       << "smaller layers";
    throw std::overflow_error(os.str());
  }
}

LayerSpec resolveSpec(const LayerSpec &in) {
  LayerSpec s = in;
  if (s.inFeatures == 0 || s.outFeatures == 0)
    throw std::invalid_argument("in_features and out_features must be positive");
  if (s.batch == 0 || s.timesteps == 0)
    throw std::invalid_argument("batch and timesteps must be positive");
  if (s.weightBytes != 2 && s.weightBytes != 4)
    throw std::invalid_argument("weight_bytes must be 4 (float) or 2 (half)");
  if (!(s.activity >= 0.0 && s.activity <= 1.0))
    throw std::invalid_argument("activity must be a fraction in [0, 1]");
  if (s.model == NeuronModel::Readout && s.recurrent)
    throw std::invalid_argument("a readout layer emits no spikes and cannot be recurrent");
  if (s.capacityIn == 0)
    s.capacityIn = autoCapacity(s.activity, s.inFeatures);
  s.capacityIn = std::min(s.capacityIn, s.inFeatures);
  if (s.model == NeuronModel::Readout) {
    s.capacityOut = 0;
  } else {
    if (s.capacityOut == 0)
      s.capacityOut = autoCapacity(s.activity, s.outFeatures);
    s.capacityOut = std::min(s.capacityOut, s.outFeatures);
  }
  checkCountsFit(s);
  return s;
}

namespace {
// The plan of the given tile boundaries (widest tile first, narrowest last:
// the estimates take the first as the typical tile and the last as the odd one).
LayerPlan planWithStarts(const LayerSpec &spec, const Target &t, std::vector<unsigned> starts,
                         unsigned sampleGroups = 1) {
  LayerPlan p;
  p.spec = resolveSpec(spec);
  p.target = t.name;
  if (sampleGroups == 0 || sampleGroups > p.spec.batch)
    throw std::invalid_argument("sample_groups must lie in [1, batch]");
  const unsigned numTiles = unsigned(starts.size() - 1);
  if (t.isIpu() && std::uint64_t(numTiles) * sampleGroups > t.numTiles)
    throw std::invalid_argument("more tiles (" + std::to_string(numTiles) + " x " +
                                std::to_string(sampleGroups) + " sample groups) than the target's " +
                                std::to_string(t.numTiles));
  placeTiles(p, t, std::move(starts), sampleGroups);
  fillCycles(p, t);
  judge(p, t);
  return p;
}

// `items` tiles of whole grains (8 neurons), as even as the grain allows and
// wider ones first; the last tile also takes the part of a grain left over.
// Even widths matter on the host, where the threads share the tiles out: 14
// tiles of 112 for 1466 neurons left a 10-neuron last tile, and one thread
// with a whole tile less work than the other.
std::vector<unsigned> evenStarts(unsigned out, unsigned items, unsigned grain) {
  const unsigned grains = unsigned(ceilDiv(out, grain));
  items = std::max(1u, std::min(items, grains));
  std::vector<unsigned> starts(items + 1, 0);
  for (unsigned i = 0; i < items; ++i)
    starts[i + 1] = starts[i] + grain * (grains / items + (i < grains % items ? 1 : 0));
  starts[items] = out;
  return starts;
}
} // namespace

LayerPlan planWithTileSize(const LayerSpec &spec, const Target &t, unsigned neuronsPerTile,
                           unsigned sampleGroups) {
  return planWithStarts(spec, t, chunkStarts(spec.outFeatures, neuronsPerTile), sampleGroups);
}

// Every distinct number of neurons per tile (a multiple of the grain) that spreads
// ``out`` neurons over one to ``budget`` tiles.
static std::set<unsigned> tileSizes(unsigned out, unsigned budget, unsigned grain) {
  std::set<unsigned> sizes;
  for (unsigned tiles = 1; tiles <= std::min(out, budget); ++tiles) {
    const unsigned chunk = roundUp(unsigned(ceilDiv(out, tiles)), grain);
    if (ceilDiv(out, chunk) <= budget)
      sizes.insert(chunk);
  }
  return sizes;
}

std::vector<LayerPlan> planCandidates(const LayerSpec &spec, const Target &t, unsigned maxTiles) {
  if (!t.isIpu())
    throw std::invalid_argument("planCandidates: an IPU target only");
  const LayerSpec s = resolveSpec(spec);
  const unsigned out = s.outFeatures;
  const unsigned budget = maxTiles ? std::min(maxTiles, t.numTiles) : t.numTiles;
  // Every distinct tile size from one tile to all of them, and for each every
  // sample split that changes the samples per group (more groups for the same
  // largest group would only use more tiles).
  const std::set<unsigned> sizes = tileSizes(out, budget, t.neuronGrain);
  std::vector<LayerPlan> fitting;
  for (unsigned chunk : sizes) {
    const unsigned tiles = unsigned(ceilDiv(out, std::min(chunk, out)));
    unsigned lastPerGroup = 0;
    for (unsigned g = 1; g <= s.batch && std::uint64_t(g) * tiles <= budget; ++g) {
      const unsigned perGroup = unsigned(ceilDiv(s.batch, g));
      if (perGroup == lastPerGroup)
        continue;
      lastPerGroup = perGroup;
      LayerPlan p = planWithTileSize(s, t, chunk, g);
      if (p.fits)
        fitting.push_back(std::move(p));
    }
  }
  std::sort(fitting.begin(), fitting.end(), [](const LayerPlan &a, const LayerPlan &b) {
    const unsigned ta = tilesUsed(a), tb = tilesUsed(b);
    return ta != tb ? ta < tb : a.cyclesTrainingStep < b.cyclesTrainingStep;
  });
  std::vector<LayerPlan> front;
  for (LayerPlan &p : fitting)
    if (front.empty() || p.cyclesTrainingStep < front.back().cyclesTrainingStep) {
      if (!front.empty() && tilesUsed(front.back()) == tilesUsed(p))
        continue;
      front.push_back(std::move(p));
    }
  return front;
}

LayerPlan planLayer(const LayerSpec &spec, const Target &t, unsigned maxTiles) {
  const LayerSpec s = resolveSpec(spec);
  const unsigned out = s.outFeatures;
  if (!t.isIpu()) {
    // Work items within the cache budget, in whole rounds of the threads so
    // that none idles in the last round (their per-sample cost hardly depends
    // on the width, so 20 neurons run faster as 16 + 4 than as 8 + 8 + 4).
    const std::uint64_t rowBytes =
        std::uint64_t(s.inFeatures + (s.recurrent ? out : 0)) * s.weightBytes;
    const unsigned g = t.neuronGrain;
    const unsigned byCache =
        unsigned(std::max<std::uint64_t>(g, t.bytesPerTile / rowBytes / g * g));
    const unsigned items = unsigned(ceilDiv(out, byCache));
    // Fewer items than threads: the threads share out the batch rather than
    // narrower tiles (host/TilePartition.hpp's SampleGroups) where the whole
    // layer's weights fit half of a tile's budget, since every thread then reads
    // all of them (a block filling most of L2 made S's 700-256 spike matmul
    // 1.05-1.18x slower, for no faster step), or where the layer is recurrent
    // (no barrier per step: 700-256 recurrent, forward and backward, 0.82).
    const unsigned groups = t.parallelTiles / items;
    const bool smallWeights = rowBytes * out <= t.bytesPerTile / 2;
    if (groups > 1 && groups <= s.batch && (smallWeights || s.recurrent))
      return planWithStarts(s, t, evenStarts(out, items, g), groups);
    const unsigned rounds = unsigned(ceilDiv(items, t.parallelTiles));
    return planWithStarts(s, t, evenStarts(out, rounds * t.parallelTiles, g));
  }
  // The fastest fitting plan (fewest tiles among equals) ...
  std::vector<LayerPlan> front = planCandidates(s, t, maxTiles);
  if (!front.empty())
    return front.back();
  // ... or, when none fits, the one-group plan with the least memory per tile.
  const unsigned budget = maxTiles ? std::min(maxTiles, t.numTiles) : t.numTiles;
  const std::set<unsigned> sizes = tileSizes(out, budget, t.neuronGrain);
  LayerPlan best;
  for (unsigned chunk : sizes) {
    LayerPlan p = planWithTileSize(s, t, chunk);
    if (best.numTiles == 0 || p.bytesPerTileMax < best.bytesPerTileMax)
      best = std::move(p);
  }
  return best;
}

} // namespace plan
} // namespace snn
