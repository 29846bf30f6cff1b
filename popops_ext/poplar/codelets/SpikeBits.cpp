// IPU only: a tile's spikes of one sample and step as bits, so that the
// backward pass knows every neuron that spiked at step t - 1, the ones the
// output list's capacity dropped included (each still reset its neuron, and
// the reset terms of the threshold gradient and the zero reset's masks need
// it). 32 neurons per word, neuron n of the tile at bit n % 32 of word n / 32.
#include <poplar/Vertex.hpp>

class SpikeBitsPack : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<float>> spiked; // 0/1 per neuron of the tile
  poplar::Output<poplar::Vector<unsigned>> bits;
  unsigned numNeurons;

  bool compute() {
    const unsigned words = bits.size();
    for (unsigned w = 0; w < words; ++w) {
      unsigned word = 0;
      const unsigned first = 32 * w;
      const unsigned end = first + 32 < numNeurons ? first + 32 : numNeurons;
      for (unsigned n = first; n < end; ++n)
        word |= (spiked[n] != 0.0f ? 1u : 0u) << (n - first);
      bits[w] = word;
    }
    return true;
  }
};

// The global ids of the tile's set bits, ascending, and their count.
class SpikeBitsToList : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<unsigned>> bits;
  poplar::Output<poplar::Vector<int>> ids; // room for numNeurons
  poplar::Output<unsigned> count;
  unsigned firstNeuron;
  unsigned numNeurons;

  bool compute() {
    unsigned k = 0;
    for (unsigned n = 0; n < numNeurons; ++n)
      if ((bits[n / 32] >> (n % 32)) & 1u)
        ids[k++] = int(firstNeuron + n);
    *count = k;
    return true;
  }
};
