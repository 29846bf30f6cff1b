// Host implementation of poplar/Graph.hpp: variables, constants and their
// tile mappings; compute sets of vertices and the wiring of their fields.
// Vertices are the classes of codelets/ (compiled for the host through
// popops_ext/host/shim), found by name in a host-only registry
// (graph_api/VertexRegistry.hpp). Errors are thrown where the SDK throws
// them: connect() checks types and sizes; the rest of the device's rules
// (mapping, exchange, memory) are checked when an Engine compiles the graph.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <poplar/ArrayRef.hpp>
#include <poplar/DebugContext.hpp>
#include <poplar/GraphElements.hpp>
#include <poplar/Interval.hpp>
#include <poplar/StringRef.hpp>
#include <poplar/Target.hpp>
#include <poplar/Tensor.hpp>
#include <poplar/TensorCloneMethod.hpp>
#include <poplar/Type.hpp>

namespace snn {
namespace hostgraph {
struct GraphModel;
} // namespace hostgraph
} // namespace snn

namespace poplar {

enum class CodeletFileType { PreprocessedAsmSource, AsmSource, CSource, CppSource, IrSource, Object, Auto };

class Graph {
public:
  using TileToTensorMapping = std::vector<std::vector<Interval>>;

  // One field of addVertex's connection list: a tensor, or a list of tensors
  // for a Vector<Input<Vector<...>>> field.
  struct ConnectionDesc {
    ConnectionDesc(StringRef field, const Tensor &t) : field(field), tensors{t} {}
    ConnectionDesc(StringRef field, ArrayRef<Tensor> ts)
        : field(field), tensors(ts.begin(), ts.end()), isList(true) {}
    std::string field;
    std::vector<Tensor> tensors;
    bool isList = false;
  };

  explicit Graph(const Target &target);
  Graph(Graph &&) noexcept;
  Graph &operator=(Graph &&) noexcept;
  ~Graph();

  const Target &getTarget() const;
  bool addCodelets(StringRef src, CodeletFileType type = CodeletFileType::Auto,
                   StringRef compileFlags = "", StringRef targetName = "");

  Tensor addVariable(const Type &type, ArrayRef<std::size_t> shape,
                     const DebugContext &debugContext = {});

  template <typename T>
  Tensor addConstant(const Type &type, ArrayRef<std::size_t> shape, ArrayRef<T> values,
                     const DebugContext &debugContext = {"<const>"}) {
    static_assert(std::is_arithmetic<T>::value, "constants are numbers");
    return addConstantValues(type, shape, values.data(), values.size(), hostKindOf<T>(),
                             sizeof(T), debugContext);
  }
  template <typename T>
  Tensor addConstant(const Type &type, ArrayRef<std::size_t> shape, T val,
                     const DebugContext &debugContext = {"<const>"},
                     typename std::enable_if<std::is_arithmetic<T>::value>::type * = nullptr) {
    return addConstantValues(type, shape, &val, 1, hostKindOf<T>(), sizeof(T), debugContext);
  }

  Tensor clone(const Tensor &t, const DebugContext &debugContext = {},
               TensorCloneMethod method = TensorCloneMethod::PRESERVE_ORDER_UNLESS_ALIASES);

  void setTileMapping(const Tensor &t, unsigned tileNum);
  void setTileMapping(const Tensor &t, const TileToTensorMapping &mapping);
  void setTileMapping(VertexRef v, unsigned tileNum);
  TileToTensorMapping getTileMapping(const Tensor &t, bool requireComplete = true) const;

  ComputeSet addComputeSet(const DebugContext &debugContext = {});
  VertexRef addVertex(ComputeSet cs, StringRef vertexType);
  VertexRef addVertex(ComputeSet cs, StringRef vertexType, ArrayRef<ConnectionDesc> connections);
  void connect(FieldRef field, const Tensor &tensor);
  void connect(FieldRef field, ArrayRef<Tensor> tensors);
  void setFieldSize(FieldRef field, std::size_t size);
  template <typename T>
  void setInitialValue(const FieldRef &field, T val,
                       typename std::enable_if<std::is_arithmetic<T>::value>::type * = nullptr) {
    setInitialValueBytes(field, &val, hostKindOf<T>(), sizeof(T));
  }
  void setPerfEstimate(const VertexRef &v, std::uint64_t cycles, std::uint64_t flops = 0);

  void createHostWrite(StringRef handle, const Tensor &t, bool rearrangeOnHost = false);
  void createHostRead(StringRef handle, const Tensor &t, bool rearrangeOnHost = false);

  // Not part of the SDK's interface: the host implementation's state.
  snn::hostgraph::GraphModel &hostModel() { return *model_; }
  const snn::hostgraph::GraphModel &hostModel() const { return *model_; }

private:
  // 'f' float, 'i' signed integer, 'u' unsigned integer, 'b' bool.
  template <typename T> static char hostKindOf() {
    return std::is_same<T, bool>::value          ? 'b'
           : std::is_floating_point<T>::value    ? 'f'
           : std::is_signed<T>::value            ? 'i'
                                                 : 'u';
  }
  Tensor addConstantValues(const Type &type, ArrayRef<std::size_t> shape, const void *values,
                           std::size_t count, char kind, std::size_t size,
                           const DebugContext &debugContext);
  void setInitialValueBytes(const FieldRef &field, const void *value, char kind,
                            std::size_t size);

  std::unique_ptr<snn::hostgraph::GraphModel> model_;
};

} // namespace poplar
