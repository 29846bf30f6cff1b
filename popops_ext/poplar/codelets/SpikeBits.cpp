// IPU only: a tile's spikes of one sample and step as bits, so that the
// backward pass knows every neuron that spiked at step t - 1, the ones the
// output list's capacity dropped included (each still reset its neuron, and
// the reset terms of the threshold gradient and the zero reset's masks need
// it). 16 neurons per word, neuron n of the tile at bit n % 16 of word n / 16;
// a word is a float (an integer below 2^16, exact), so that the op's output
// can be kept on PopART's loss path like its other float outputs.
#include <poplar/Vertex.hpp>

class SpikeBitsPack : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<float>> spiked; // 0/1 per neuron of the tile
  poplar::Output<poplar::Vector<float>> bits;
  unsigned numNeurons;

  bool compute() {
    const unsigned words = bits.size();
    for (unsigned w = 0; w < words; ++w) {
      unsigned word = 0;
      const unsigned first = 16 * w;
      const unsigned end = first + 16 < numNeurons ? first + 16 : numNeurons;
      for (unsigned n = first; n < end; ++n)
        word |= (spiked[n] != 0.0f ? 1u : 0u) << (n - first);
      bits[w] = float(word);
    }
    return true;
  }
};

// The global ids of the tile's set bits, ascending, and their count.
class SpikeBitsToList : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<float>> bits;
  poplar::Output<poplar::Vector<int>> ids; // room for numNeurons
  poplar::Output<unsigned> count;
  unsigned firstNeuron;
  unsigned numNeurons;

  bool compute() {
    unsigned k = 0;
    for (unsigned w = 0; w * 16 < numNeurons; ++w) {
      const unsigned word = unsigned(bits[w]);
      for (unsigned n = 16 * w; n < 16 * w + 16 && n < numNeurons; ++n)
        if ((word >> (n - 16 * w)) & 1u)
          ids[k++] = int(firstNeuron + n);
    }
    *count = k;
    return true;
  }
};
