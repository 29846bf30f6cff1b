// The vertex classes of codelets/ and popops_ext/poplar/codelets/, registered
// for the host graph: names as the graph builders use them, every field, and
// each vertex's size contract (what its compute() assumes of its fields'
// sizes; checked once per vertex when an Engine binds it, since a device
// vertex that breaks it reads or writes past its tensors without a word).
#include "VertexRegistry.hpp"

#include <poplar/exceptions.hpp>

#include "NeuronUpdate.hpp"
#include "SpikeListCombine.hpp"
#include "SpikeMatmul.hpp"
#include "StateGrad.hpp"
#include "WeightGrad.hpp"
#include "poplar/codelets/SpikeBits.cpp"
#include "poplar/codelets/TileListSlice.cpp"
#include "TestVertices.hpp"

#include <algorithm>
#include <map>
#include <sstream>

namespace snn {
namespace hostgraph {

namespace {

// Collects the broken parts of a size contract.
class Sizes {
public:
  Sizes &atLeast(const char *field, std::size_t size, std::size_t need, const char *what) {
    if (size < need)
      add(std::string(field) + " holds " + std::to_string(size) + " elements, fewer than " + what +
          " (" + std::to_string(need) + ")");
    return *this;
  }
  // An optional input: empty, or at least `need`.
  Sizes &emptyOrAtLeast(const char *field, std::size_t size, std::size_t need, const char *what) {
    if (size != 0)
      atLeast(field, size, need, what);
    return *this;
  }
  Sizes &equal(const char *field, std::size_t size, std::size_t need, const char *what) {
    if (size != need)
      add(std::string(field) + " holds " + std::to_string(size) + " elements, not " + what +
          " (" + std::to_string(need) + ")");
    return *this;
  }
  Sizes &positive(const char *field, std::size_t value) {
    if (value == 0)
      add(std::string(field) + " is 0");
    return *this;
  }
  Sizes &multipleOf(const char *field, std::size_t size, std::size_t of, const char *what) {
    if (of != 0 && size % of != 0)
      add(std::string(field) + " holds " + std::to_string(size) +
          " elements, not a multiple of " + what + " (" + std::to_string(of) + ")");
    return *this;
  }
  std::string str() const { return text_; }
  operator std::string() const { return text_; }

private:
  void add(const std::string &s) { text_ += (text_.empty() ? "" : "; ") + s; }
  std::string text_;
};

#define F(member) field(#member, &V::member)

template <typename WT> VertexClass spikeMatmul(const char *name) {
  using V = SpikeMatmul<WT>;
  return vertexClass<V>(name, {F(ids), F(ends), F(weights), F(currents), F(rowLength), F(accumulate)},
                        [](const V &v) -> std::string {
                          return Sizes()
                              .positive("rowLength", v.rowLength)
                              .positive("ends (samples)", v.ends.size())
                              .multipleOf("weights", v.weights.size(), v.rowLength, "rowLength")
                              .atLeast("currents", v.currents.size(),
                                       std::size_t(v.ends.size()) * v.rowLength,
                                       "samples x rowLength");
                        });
}

template <typename WT> VertexClass spikeMatmulParts(const char *name) {
  using V = SpikeMatmulParts<WT>;
  return vertexClass<V>(
      name,
      {F(ids), F(counts), F(weights), F(currents), F(rowLength), F(idStride), F(countStride),
       F(parts), F(accumulate)},
      [](const V &v) -> std::string {
        const std::size_t samples = v.countStride ? v.counts.size() / v.countStride : 0;
        return Sizes()
            .positive("rowLength", v.rowLength)
            .multipleOf("rowLength", v.rowLength, 8, "8-float chunks")
            .positive("countStride", v.countStride)
            .positive("parts", v.parts)
            .multipleOf("counts", v.counts.size(), v.countStride, "countStride")
            .multipleOf("weights", v.weights.size(), v.rowLength, "rowLength")
            .atLeast("ids", v.ids.size(), samples * v.idStride, "the samples x idStride")
            .atLeast("currents", v.currents.size(), samples * v.rowLength,
                     "the samples x rowLength");
      });
}

template <typename V> Sizes neuronState(const V &v) {
  const std::size_t n = v.numNeurons;
  Sizes s;
  s.positive("numNeurons", n)
      .atLeast("currents", v.currents.size(), n, "numNeurons")
      .emptyOrAtLeast("bias", v.bias.size(), n, "numNeurons")
      .atLeast("beta", v.beta.size(), n, "numNeurons")
      .atLeast("membrane", v.membrane.size(), n, "numNeurons");
  return s;
}

template <typename V> std::string spikingState(const V &v) {
  const std::size_t n = v.numNeurons;
  return neuronState(v)
      .atLeast("threshold", v.threshold.size(), n, "numNeurons")
      .atLeast("spiked", v.spiked.size(), n, "numNeurons")
      // the emission writes every neuron at the end of both lists
      .atLeast("spikeIds", v.spikeIds.size(), n, "numNeurons")
      .atLeast("spikeMembrane", v.spikeMembrane.size(), n, "numNeurons")
      .atLeast("eligibleIds", v.eligibleIds.size(), n, "numNeurons")
      .atLeast("eligibleMembrane", v.eligibleMembrane.size(), n, "numNeurons")
      .equal("counts", v.counts.size(), 2, "{spikes, eligible}");
}

VertexClass lifUpdate() {
  using V = LifUpdate;
  return vertexClass<V>("LifUpdate",
                        {F(currents), F(bias), F(beta), F(threshold), F(membrane), F(spiked),
                         F(spikeIds), F(spikeMembrane), F(eligibleIds), F(eligibleMembrane),
                         F(counts), F(numNeurons), F(firstNeuron), F(reset), F(gradWindow)},
                        [](const V &v) { return spikingState(v); });
}

VertexClass synapticUpdate() {
  using V = SynapticUpdate;
  return vertexClass<V>(
      "SynapticUpdate",
      {F(currents), F(bias), F(alpha), F(beta), F(threshold), F(synaptic), F(membrane), F(spiked),
       F(spikeIds), F(spikeMembrane), F(eligibleIds), F(eligibleMembrane), F(counts),
       F(numNeurons), F(firstNeuron), F(reset), F(gradWindow)},
      [](const V &v) -> std::string {
        std::string s = spikingState(v);
        const std::string more = Sizes()
                                     .atLeast("alpha", v.alpha.size(), v.numNeurons, "numNeurons")
                                     .atLeast("synaptic", v.synaptic.size(), v.numNeurons,
                                              "numNeurons");
        return s.empty() ? more : more.empty() ? s : s + "; " + more;
      });
}

VertexClass readoutUpdate() {
  using V = ReadoutUpdate;
  return vertexClass<V>("ReadoutUpdate",
                        {F(currents), F(bias), F(beta), F(membrane), F(membraneOut), F(numNeurons)},
                        [](const V &v) -> std::string {
                          return neuronState(v).atLeast("membraneOut", v.membraneOut.size(),
                                                        v.numNeurons, "numNeurons");
                        });
}

template <typename V> VertexClass spikeListCombine(const char *name) {
  return vertexClass<V>(
      name,
      {F(spikeIds), F(spikeMembrane), F(eligibleIds), F(eligibleMembrane), F(tileCounts), F(ids),
       F(membrane), F(counts)},
      [](const V &v) -> std::string {
        const std::size_t tiles = v.spikeIds.size();
        Sizes s;
        s.positive("spikeIds (tiles)", tiles)
            .equal("spikeMembrane (tiles)", v.spikeMembrane.size(), tiles, "spikeIds' tiles")
            .equal("eligibleIds (tiles)", v.eligibleIds.size(), tiles, "spikeIds' tiles")
            .equal("eligibleMembrane (tiles)", v.eligibleMembrane.size(), tiles,
                   "spikeIds' tiles")
            .equal("tileCounts", v.tileCounts.size(), 2 * tiles, "2 x tiles")
            .atLeast("membrane", v.membrane.size(), v.ids.size(), "ids' capacity")
            .equal("counts", v.counts.size(), 4, "{listed spikes, listed, spikes, needed}");
        for (std::size_t i = 0; i < tiles && i < v.spikeMembrane.size() &&
                                i < v.eligibleMembrane.size() && i < v.eligibleIds.size();
             ++i) {
          s.equal("spikeMembrane[i]", v.spikeMembrane[i].size(), v.spikeIds[i].size(),
                  "spikeIds[i]'s size");
          s.equal("eligibleMembrane[i]", v.eligibleMembrane[i].size(), v.eligibleIds[i].size(),
                  "eligibleIds[i]'s size");
        }
        return s;
      });
}

VertexClass tileListSlice() {
  using V = TileListSlice;
  return vertexClass<V>(
      "TileListSlice",
      {F(ids), F(membrane), F(grad), F(counts), F(outIds), F(outMembrane), F(outGrad),
       F(numSpikes), F(numListed), F(firstNeuron), F(numNeurons), F(spikesOnly)},
      [](const V &v) -> std::string {
        return Sizes()
            .emptyOrAtLeast("membrane", v.membrane.size(), v.ids.size(), "ids' size")
            .emptyOrAtLeast("grad", v.grad.size(), v.ids.size(), "ids' size")
            .atLeast("counts", v.counts.size(), 2, "{spikes, listed}")
            .emptyOrAtLeast("outMembrane", v.outMembrane.size(), v.outIds.size(), "outIds' size")
            .emptyOrAtLeast("outGrad", v.outGrad.size(), v.outIds.size(), "outIds' size");
      });
}

template <typename V> Sizes stateGrad(const V &v) {
  const std::size_t n = v.numNeurons;
  Sizes s;
  s.positive("numNeurons", n)
      .atLeast("beta", v.beta.size(), n, "numNeurons")
      .emptyOrAtLeast("prevMembrane", v.prevMembrane.size(), n, "numNeurons")
      .atLeast("carry", v.carry.size(), n, "numNeurons")
      .atLeast("currentGrad", v.currentGrad.size(), n, "numNeurons")
      .atLeast("betaGrad", v.betaGrad.size(), n, "numNeurons");
  return s;
}

template <typename V> Sizes spikingStateGrad(const V &v) {
  const std::size_t n = v.numNeurons;
  Sizes s = stateGrad(v);
  s.equal("listMembrane", v.listMembrane.size(), v.listIds.size(), "listIds' size")
      .equal("listGrad", v.listGrad.size(), v.listIds.size(), "listIds' size")
      .atLeast("threshold", v.threshold.size(), n, "numNeurons")
      .atLeast("notSpiked", v.notSpiked.size(), n, "numNeurons")
      .atLeast("thresholdGrad", v.thresholdGrad.size(), n, "numNeurons");
  return s;
}

VertexClass lifStateGrad() {
  using V = LifStateGrad;
  return vertexClass<V>(
      "LifStateGrad",
      {F(listIds), F(listMembrane), F(listGrad), F(numListed), F(prevSpikeIds), F(numPrevSpikes),
       F(beta), F(threshold), F(prevMembrane), F(carry), F(notSpiked), F(currentGrad),
       F(betaGrad), F(thresholdGrad), F(numNeurons), F(firstNeuron), F(reset), F(surrogateKind),
       F(surrogateP0), F(surrogateP1)},
      [](const V &v) -> std::string { return spikingStateGrad(v); });
}

VertexClass synapticStateGrad() {
  using V = SynapticStateGrad;
  return vertexClass<V>(
      "SynapticStateGrad",
      {F(listIds), F(listMembrane), F(listGrad), F(numListed), F(prevSpikeIds), F(numPrevSpikes),
       F(alpha), F(beta), F(threshold), F(prevMembrane), F(prevSynaptic), F(carry),
       F(carrySynaptic), F(notSpiked), F(currentGrad), F(alphaGrad), F(betaGrad),
       F(thresholdGrad), F(numNeurons), F(firstNeuron), F(reset), F(surrogateKind),
       F(surrogateP0), F(surrogateP1)},
      [](const V &v) -> std::string {
        const std::size_t n = v.numNeurons;
        return spikingStateGrad(v)
            .atLeast("alpha", v.alpha.size(), n, "numNeurons")
            .emptyOrAtLeast("prevSynaptic", v.prevSynaptic.size(), n, "numNeurons")
            .atLeast("carrySynaptic", v.carrySynaptic.size(), n, "numNeurons")
            .atLeast("alphaGrad", v.alphaGrad.size(), n, "numNeurons");
      });
}

VertexClass readoutStateGrad() {
  using V = ReadoutStateGrad;
  return vertexClass<V>("ReadoutStateGrad",
                        {F(outputGrad), F(beta), F(prevMembrane), F(carry), F(currentGrad),
                         F(betaGrad), F(numNeurons)},
                        [](const V &v) -> std::string {
                          return stateGrad(v).atLeast("outputGrad", v.outputGrad.size(),
                                                      v.numNeurons, "numNeurons");
                        });
}

VertexClass weightGradScatter() {
  using V = WeightGradScatter;
  return vertexClass<V>("WeightGradScatter",
                        {F(ids), F(numIds), F(currentGrad), F(weightGrad), F(biasGrad),
                         F(rowLength)},
                        [](const V &v) -> std::string {
                          return Sizes()
                              .positive("rowLength", v.rowLength)
                              .multipleOf("weightGrad", v.weightGrad.size(), v.rowLength,
                                          "rowLength")
                              .atLeast("currentGrad", v.currentGrad.size(), v.rowLength,
                                       "rowLength")
                              .emptyOrAtLeast("biasGrad", v.biasGrad.size(), v.rowLength,
                                              "rowLength");
                        });
}

VertexClass weightGradRows() {
  using V = WeightGradRows;
  return vertexClass<V>(
      "WeightGradRows",
      {F(ids), F(counts), F(currentGrad), F(weightGrad), F(biasGrad), F(rowLength), F(idStride),
       F(countStride)},
      [](const V &v) -> std::string {
        const std::size_t samples = v.countStride ? v.counts.size() / v.countStride : 0;
        return Sizes()
            .positive("rowLength", v.rowLength)
            .positive("countStride", v.countStride)
            .multipleOf("weightGrad", v.weightGrad.size(), v.rowLength, "rowLength")
            .multipleOf("counts", v.counts.size(), v.countStride, "countStride")
            .atLeast("ids", v.ids.size(), samples * v.idStride, "the samples x idStride")
            .atLeast("currentGrad", v.currentGrad.size(), samples * v.rowLength,
                     "the samples x rowLength")
            .emptyOrAtLeast("biasGrad", v.biasGrad.size(), v.rowLength, "rowLength");
      });
}

// What both input-gradient vertices read whole: the tile's weight rows and one
// row of dL/dI.
template <typename V> Sizes inputGradRows(const V &v) {
  Sizes s;
  s.positive("rowLength", v.rowLength)
      .multipleOf("weights", v.weights.size(), v.rowLength, "rowLength")
      .atLeast("currentGrad", v.currentGrad.size(), v.rowLength, "rowLength");
  return s;
}

template <typename WT> VertexClass inputSpikeGrad(const char *name) {
  using V = InputSpikeGrad<WT>;
  return vertexClass<V>(name,
                        {F(ids), F(numIds), F(weights), F(currentGrad), F(partials), F(rowLength)},
                        [](const V &v) -> std::string {
                          return inputGradRows(v).atLeast("partials", v.partials.size(),
                                                          v.ids.size(), "ids' capacity");
                        });
}

template <typename WT> VertexClass inputSpikeGradRange(const char *name) {
  using V = InputSpikeGradRange<WT>;
  return vertexClass<V>(name,
                        {F(ids), F(numIds), F(weights), F(currentGrad), F(partials), F(rowLength),
                         F(first)},
                        [](const V &v) -> std::string {
                          return inputGradRows(v).atLeast("ids", v.ids.size(), v.partials.size(),
                                                          "partials' size");
                        });
}

VertexClass partialReduce() {
  using V = PartialReduce;
  return vertexClass<V>("PartialReduce",
                        {F(partials), F(out), F(numOut), F(numPartials), F(stride)},
                        [](const V &v) -> std::string {
                          return Sizes()
                              .atLeast("partials", v.partials.size(),
                                       std::size_t(v.numPartials) * v.stride,
                                       "numPartials x stride")
                              .atLeast("stride", v.stride, v.out.size(), "out's size");
                        });
}

VertexClass partialReduceRange() {
  using V = PartialReduceRange;
  return vertexClass<V>("PartialReduceRange",
                        {F(partials), F(out), F(numOut), F(first), F(numPartials), F(stride)},
                        [](const V &v) -> std::string {
                          return Sizes()
                              .atLeast("partials", v.partials.size(),
                                       std::size_t(v.numPartials) * v.stride,
                                       "numPartials x stride")
                              .atLeast("stride", v.stride, v.out.size(), "out's size");
                        });
}

VertexClass spikeBitsPack() {
  using V = SpikeBitsPack;
  return vertexClass<V>("SpikeBitsPack", {F(spiked), F(bits), F(numNeurons)},
                        [](const V &v) -> std::string {
                          return Sizes()
                              .atLeast("spiked", v.spiked.size(), v.numNeurons, "numNeurons")
                              .atLeast("bits", v.bits.size(), (v.numNeurons + 15) / 16,
                                       "16 neurons per word");
                        });
}

VertexClass spikeBitsToList() {
  using V = SpikeBitsToList;
  return vertexClass<V>("SpikeBitsToList",
                        {F(bits), F(ids), F(count), F(firstNeuron), F(numNeurons)},
                        [](const V &v) -> std::string {
                          return Sizes()
                              .atLeast("bits", v.bits.size(), (v.numNeurons + 15) / 16,
                                       "16 neurons per word")
                              .atLeast("ids", v.ids.size(), v.numNeurons, "numNeurons");
                        });
}

VertexClass testReadsItsOutput() {
  using V = testing::ReadsItsOutput;
  return vertexClass<V>("TestReadsItsOutput", {F(in), F(out)}, [](const V &v) -> std::string {
    return Sizes().atLeast("in", v.in.size(), v.out.size(), "out's size");
  });
}

VertexClass testWorkerIds() {
  using V = testing::WorkerIds;
  return vertexClass<V>("TestWorkerIds", {F(out)}, [](const V &) { return std::string(); });
}

VertexClass testAligned() {
  using V = testing::Aligned;
  return vertexClass<V>("TestAligned", {F(in), F(out), F(aligned)}, [](const V &v) -> std::string {
    return Sizes().atLeast("in", v.in.size(), v.out.size(), "out's size");
  });
}

#undef F

// Every member of the class is registered: the fields, in offset order,
// leave no gap but alignment padding.
void checkLayout(const VertexClass &c) {
  std::vector<const FieldInfo *> fields;
  for (const auto &f : c.fields)
    fields.push_back(&f);
  std::sort(fields.begin(), fields.end(),
            [](const FieldInfo *a, const FieldInfo *b) { return a->offset < b->offset; });
  std::size_t end = 0;
  for (const FieldInfo *f : fields) {
    const std::size_t expected = (end + f->memberAlign - 1) / f->memberAlign * f->memberAlign;
    if (f->offset != expected)
      throw poplar::poplar_error("vertex registry: " + c.name + " has an unregistered member "
                                 "before field '" + f->name + "'");
    end = f->offset + f->size;
  }
  if ((end + c.align - 1) / c.align * c.align != c.size)
    throw poplar::poplar_error("vertex registry: " + c.name +
                               " has an unregistered member after its last field");
}

std::vector<VertexClass> buildRegistry() {
  std::vector<VertexClass> r = {
      spikeMatmul<float>("SpikeMatmul<float>"),
      spikeMatmul<half>("SpikeMatmul<half>"),
      spikeMatmulParts<float>("SpikeMatmulParts<float>"),
      spikeMatmulParts<half>("SpikeMatmulParts<half>"),
      lifUpdate(),
      synapticUpdate(),
      readoutUpdate(),
      spikeListCombine<SpikeListCombine>("SpikeListCombine"),
      spikeListCombine<SpikeListCombineParts>("SpikeListCombineParts"),
      tileListSlice(),
      lifStateGrad(),
      synapticStateGrad(),
      readoutStateGrad(),
      weightGradScatter(),
      weightGradRows(),
      inputSpikeGrad<float>("InputSpikeGrad<float>"),
      inputSpikeGrad<half>("InputSpikeGrad<half>"),
      inputSpikeGradRange<float>("InputSpikeGradRange<float>"),
      inputSpikeGradRange<half>("InputSpikeGradRange<half>"),
      partialReduce(),
      partialReduceRange(),
      spikeBitsPack(),
      spikeBitsToList(),
      testReadsItsOutput(),
      testWorkerIds(),
      testAligned(),
  };
  for (const auto &c : r)
    checkLayout(c);
  return r;
}

} // namespace

int VertexClass::fieldIndex(const std::string &field) const {
  for (std::size_t i = 0; i < fields.size(); ++i)
    if (fields[i].name == field)
      return int(i);
  return -1;
}

const std::vector<VertexClass> &registeredVertices() {
  static const std::vector<VertexClass> registry = buildRegistry();
  return registry;
}

const VertexClass *findVertexClass(const std::string &name) {
  for (const auto &c : registeredVertices())
    if (c.name == name)
      return &c;
  return nullptr;
}

unsigned numWorkersOf(const VertexClass &cls) {
  return cls.multiVertex ? poplar::MultiVertex::numWorkers() : 1;
}

} // namespace hostgraph
} // namespace snn
