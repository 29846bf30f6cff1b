// Vertices that exist only to test the host graph's checks and vertex kinds
// (tests/test_graph_api.py): one reads its Output before writing it, as no
// codelet may; one is a MultiVertex; one declares an 8-byte-aligned vector.
// Registered under names starting with "Test".
#pragma once
#include <poplar/Vertex.hpp>

namespace snn {
namespace hostgraph {
namespace testing {

// out[i] += in[i]: reads its Output (should be InOut).
class ReadsItsOutput : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<float>> in;
  poplar::Output<poplar::Vector<float>> out;
  bool compute() {
    for (unsigned i = 0; i < out.size(); ++i)
      out[i] += in[i];
    return true;
  }
};

// out[w] = w + 1 for each worker w; out[i] = 0 past the workers.
class WorkerIds : public poplar::MultiVertex {
public:
  poplar::Output<poplar::Vector<unsigned>> out;
  bool compute(unsigned workerId) {
    for (unsigned i = workerId; i < out.size(); i += numWorkers())
      out[i] = i < numWorkers() ? workerId + 1 : 0;
    return true;
  }
};

// out = in * 2 over 8-byte-aligned vectors, reporting whether they were.
class Aligned : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<float, poplar::VectorLayout::SPAN, 8>> in;
  poplar::Output<poplar::Vector<float, poplar::VectorLayout::SPAN, 8>> out;
  poplar::Output<unsigned> aligned;
  bool compute() {
    *aligned = (reinterpret_cast<unsigned long>(&in[0]) % 8 == 0) &&
               (reinterpret_cast<unsigned long>(&out[0]) % 8 == 0);
    for (unsigned i = 0; i < out.size(); ++i)
      out[i] = 2.0f * in[i];
    return true;
  }
};

} // namespace testing
} // namespace hostgraph
} // namespace snn
