// The snn_ipu._graph module: the host implementation of the Poplar graph API
// from Python. run_op executes the PopART ops' graphs (the ipu_graph
// backend); Graph / Tensor / programs / Engine mirror the C++ API for tests
// and for building graphs by hand; graph_report builds a network's training
// step and reports its tiles without running it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <poplar/Engine.hpp>
#include <poplar/Graph.hpp>
#include <poplar/Program.hpp>
#include <poplar/exceptions.hpp>
#include <popops/Zero.hpp>
#include <poputil/TileMapping.hpp>

#include "Model.hpp"
#include "LayerOps.hpp"
#include "OpRunner.hpp"
#include "OpSignatures.hpp"
#include "Report.hpp"
#include "VertexRegistry.hpp"

#include <cstring>
#include <memory>

namespace py = pybind11;
using namespace snn::hostgraph;

namespace {

poplar::Type typeFromName(const std::string &name) {
  static const std::map<std::string, poplar::Type> types = {
      {"float", poplar::FLOAT}, {"half", poplar::HALF},          {"int", poplar::INT},
      {"unsigned int", poplar::UNSIGNED_INT}, {"bool", poplar::BOOL},
      {"unsigned char", poplar::UNSIGNED_CHAR}, {"short", poplar::SHORT}};
  auto it = types.find(name);
  if (it == types.end())
    throw py::value_error("unknown element type '" + name + "'");
  return it->second;
}

py::dtype dtypeOf(const poplar::Type &t) {
  const TypeInfo &ti = typeInfo(t);
  switch (ti.kind) {
  case 'f': return py::dtype("float32");
  case 'h': return py::dtype("float16");
  case 'b': return py::dtype("bool");
  case 'i': return py::dtype(ti.size == 1 ? "int8" : ti.size == 2 ? "int16" : ti.size == 4 ? "int32" : "int64");
  default: return py::dtype(ti.size == 1 ? "uint8" : ti.size == 2 ? "uint16" : ti.size == 4 ? "uint32" : "uint64");
  }
}

poplar::Type typeOfArray(const py::array &a) {
  const char kind = a.dtype().kind();
  const auto size = a.itemsize();
  if (kind == 'f' && size == 4) return poplar::FLOAT;
  if (kind == 'f' && size == 2) return poplar::HALF;
  if (kind == 'i' && size == 4) return poplar::INT;
  if (kind == 'u' && size == 4) return poplar::UNSIGNED_INT;
  if (kind == 'b') return poplar::BOOL;
  throw py::type_error("arrays of float32, float16, int32, uint32 or bool only, got " +
                       std::string(py::str(a.dtype())));
}

HostArray toHost(const py::array &in) {
  py::array a = py::array::ensure(in, py::array::c_style);
  HostArray h;
  h.type = typeOfArray(a);
  for (py::ssize_t d = 0; d < a.ndim(); ++d)
    h.shape.push_back(std::size_t(a.shape(d)));
  h.data.resize(std::size_t(a.nbytes()));
  std::memcpy(h.data.data(), a.data(), h.data.size());
  return h;
}

py::array toNumpy(const HostArray &h) {
  std::vector<py::ssize_t> shape(h.shape.begin(), h.shape.end());
  py::array a(dtypeOf(h.type), shape);
  std::memcpy(a.mutable_data(), h.data.data(), h.data.size());
  return a;
}

Attributes toAttributes(const py::dict &d) {
  Attributes a;
  for (const auto &kv : d)
    a[py::cast<std::string>(kv.first)] = py::cast<double>(kv.second);
  return a;
}

OpRunner &runner(bool checkOutputReads) {
  static OpRunner checked(true), unchecked(false);
  return checkOutputReads ? checked : unchecked;
}

// A Python handle on a vertex, keeping its graph alive.
struct Vertex {
  std::shared_ptr<poplar::Graph> graph;
  poplar::VertexRef ref;
};

void connect(poplar::Graph &g, const Vertex &v, const std::string &field, const py::object &what) {
  if (py::isinstance<py::list>(what) || py::isinstance<py::tuple>(what))
    g.connect(v.ref[field], py::cast<std::vector<poplar::Tensor>>(what));
  else
    g.connect(v.ref[field], py::cast<poplar::Tensor>(what));
}

} // namespace

PYBIND11_MODULE(_graph, m) {
  m.doc() = "The host implementation of the Poplar graph API (see docs/ipu.md)";
  static py::exception<poplar::poplar_error> error(m, "PoplarError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const poplar::poplar_error &e) {
      py::set_error(error, e.what());
    }
  });

  m.def(
      "run_op",
      [](const std::string &op, const py::dict &attributes, const std::vector<py::object> &inputs,
         const std::vector<py::array> &forwardInputs, bool checkOutputReads) {
        std::vector<HostArray> in;
        for (const auto &a : inputs) {
          if (a.is_none()) { // unconnected, as PopART leaves an optional grad input
            HostArray absent;
            absent.absent = true;
            in.push_back(std::move(absent));
          } else {
            in.push_back(toHost(py::cast<py::array>(a)));
          }
        }
        ForwardSpecs specs;
        for (const auto &a : forwardInputs) {
          const HostArray h = toHost(a);
          specs.push_back({h.type, h.shape});
        }
        const Attributes attrs = toAttributes(attributes);
        std::vector<HostArray> out;
        {
          py::gil_scoped_release release;
          out = runner(checkOutputReads).run(op, attrs, in, specs);
        }
        std::vector<py::array> result;
        for (const auto &h : out)
          result.push_back(toNumpy(h));
        return result;
      },
      py::arg("op"), py::arg("attributes"), py::arg("inputs"),
      py::arg("forward_inputs") = std::vector<py::array>(), py::arg("check_output_reads") = true,
      "Runs one of the PopART ops (SnnSpikingLayer, SnnSpikingLayerGrad, SnnReadoutLayer, "
      "SnnReadoutLayerGrad) on the host graph; inputs and outputs as the op's. A grad op also "
      "takes the forward op's inputs (for their dtypes and shapes). None for an input leaves it "
      "unconnected, as PopART leaves a grad op's optional input.");

  m.def(
      "run_network",
      [](const std::vector<std::string> &ops, const std::vector<py::dict> &attributes,
         const std::vector<std::vector<py::object>> &inputs, bool grad,
         const std::vector<std::vector<py::array>> &forwardInputs, bool checkOutputReads) {
        NetworkCall call;
        call.ops = ops;
        call.grad = grad;
        for (const auto &a : attributes)
          call.attributes.push_back(toAttributes(a));
        for (const auto &layer : inputs) {
          call.inputs.emplace_back();
          for (const auto &a : layer) {
            HostArray h;
            if (a.is_none())
              h.absent = true;
            else
              h = toHost(py::cast<py::array>(a));
            call.inputs.back().push_back(std::move(h));
          }
        }
        for (const auto &layer : forwardInputs) {
          call.forwardInputs.emplace_back();
          for (const auto &a : layer) {
            const HostArray h = toHost(a);
            call.forwardInputs.back().push_back({h.type, h.shape});
          }
        }
        std::vector<std::vector<HostArray>> out;
        {
          py::gil_scoped_release release;
          out = runner(checkOutputReads).runNetwork(call);
        }
        std::vector<std::vector<py::array>> result;
        for (const auto &layer : out) {
          result.emplace_back();
          for (const auto &h : layer)
            result.back().push_back(toNumpy(h));
        }
        return result;
      },
      py::arg("ops"), py::arg("attributes"), py::arg("inputs"), py::arg("grad") = false,
      py::arg("forward_inputs") = std::vector<std::vector<py::array>>(),
      py::arg("check_output_reads") = true,
      "Runs a pipelined stack of layer ops as one program, the fused time loop "
      "(popops_ext/poplar/NetworkOps.hpp): per layer its forward op's name, attributes and "
      "inputs (None for a list input of a layer after the first: it reads the layer "
      "before's list, one step late); with grad=True the network's backward, per layer its "
      "grad op's inputs and its forward op's inputs (for their dtypes and shapes). Returns "
      "per layer its op's outputs.");

  m.def("op_signatures", [] {
    py::dict out;
    for (const snn::ops::OpSignature *s : snn::ops::kAllOps) {
      py::list inputs, outputs, gradInputs, gradOutputs, optionalGradInputs;
      for (int i = 0; i < s->numInputs; ++i)
        inputs.append(s->inputs[i].name);
      for (int i = 0; i < s->numOutputs; ++i)
        outputs.append(s->outputs[i].name);
      for (int i = 0; i < s->numGradInputs; ++i) {
        const auto src = s->gradInputs[i].source;
        gradInputs.append(py::make_tuple(src == snn::ops::GradSource::GradOut ? "GradOut"
                                         : src == snn::ops::GradSource::In    ? "In"
                                                                              : "Out",
                                         s->gradInputs[i].index));
        if (snn::ops::gradInputIsOptional(s->gradInputs[i]))
          optionalGradInputs.append(i);
      }
      for (int i = 0; i < s->numGradOutputs; ++i)
        gradOutputs.append(py::make_tuple(i, s->gradOutputs[i]));
      out[py::str(s->name)] = py::dict(
          py::arg("inputs") = inputs, py::arg("outputs") = outputs,
          py::arg("grad_op") = std::string(s->gradName), py::arg("grad_inputs") = gradInputs,
          py::arg("grad_outputs") = gradOutputs,
          py::arg("optional_grad_inputs") = optionalGradInputs);
    }
    return out;
  }, "Each forward op's inputs, outputs and grad op wiring: popops_ext/poplar/OpSignatures.hpp, "
     "the table PopART's gradInputInfo and gradOutToNonGradIn are built from.");

  m.def(
      "op_grad_outputs",
      [](const std::string &op, const py::dict &attributes) {
        for (snn::ipu::OpKind kind : {snn::ipu::OpKind::Spiking, snn::ipu::OpKind::Readout}) {
          if (op != snn::ipu::signature(kind).name)
            continue;
          const auto given = snn::ipu::gradOutputInputs(
              kind, snn::ipu::LayerAttributes::parse(
                        snn::ipu::AttributeMap::fromNumbers(toAttributes(attributes))));
          py::list out;
          for (std::size_t i = 0; i < given.size(); ++i)
            out.append(py::make_tuple(int(i), given[i]));
          return out;
        }
        throw poplar::poplar_error("unknown op '" + op + "'");
      },
      py::arg("op"), py::arg("attributes"),
      "(grad output, forward input) of the grad op of `op` with these attributes "
      "(LayerOps.hpp: gradOutputInputs): the signature's grad_outputs, less in_values where "
      "input_needs_grad is 0.");

  m.def("vertex_classes", [] {
    py::list out;
    for (const auto &c : registeredVertices()) {
      py::list fields;
      for (const auto &f : c.fields) {
        const char *kind = f.kind == FieldKind::Input    ? "Input"
                           : f.kind == FieldKind::Output ? "Output"
                           : f.kind == FieldKind::InOut  ? "InOut"
                                                         : "state";
        fields.append(py::make_tuple(f.name, kind, f.type.toString()));
      }
      out.append(py::dict(py::arg("name") = c.name, py::arg("multi_vertex") = c.multiVertex,
                          py::arg("fields") = fields));
    }
    return out;
  });

  m.def(
      "graph_report",
      [](const py::list &layers, unsigned batch, unsigned steps, unsigned inputCapacity,
         bool fused) {
        std::vector<LayerSpecification> specs;
        for (const auto &item : layers) {
          const py::dict d = py::reinterpret_borrow<py::dict>(item);
          LayerSpecification s;
          s.name = py::cast<std::string>(d["name"]);
          s.attributes = toAttributes(d["attributes"]);
          s.inFeatures = py::cast<unsigned>(d["in_features"]);
          s.outFeatures = py::cast<unsigned>(d["out_features"]);
          s.weightType = py::cast<std::string>(d["weight_type"]);
          specs.push_back(std::move(s));
        }
        GraphReport r;
        {
          py::gil_scoped_release release;
          r = graphReport(specs, batch, steps, inputCapacity, fused);
        }
        auto opDict = [](const OpReport &o) {
          return py::dict(
              py::arg("layer") = o.layer, py::arg("op") = o.op, py::arg("steps") = o.steps,
              py::arg("step_compute_cycles") = o.stepComputeCycles,
              py::arg("step_sync_cycles") = o.stepSyncCycles,
              py::arg("step_exchange_cycles") = o.stepExchangeCycles,
              py::arg("step_popops_cycles") = o.stepPopopsCycles,
              py::arg("step_exchange_bytes") = o.stepExchangeBytes,
              py::arg("step_exchange_bytes_max_tile") = o.stepExchangeBytesMaxTile,
              py::arg("once_cycles") = o.onceCycles, py::arg("total_cycles") = o.totalCycles(),
              py::arg("step_compute_sets") = o.stepComputeSets);
        };
        py::list ops, fusedOps;
        for (const OpReport &o : r.ops)
          ops.append(opDict(o));
        for (const OpReport &o : r.fusedOps)
          fusedOps.append(opDict(o));
        return py::dict(py::arg("ops") = ops, py::arg("fused_ops") = fusedOps,
                        py::arg("bytes_per_tile") = r.bytesPerTile,
                        py::arg("reserved_bytes_per_tile") = r.reservedBytesPerTile,
                        py::arg("variable_bytes") = r.variableBytes,
                        py::arg("vertex_state_bytes") = r.vertexStateBytes,
                        py::arg("vertices") = r.vertices, py::arg("layer_bytes") = r.layerBytes,
                        py::arg("max_tile") = r.maxTile,
                        py::arg("max_tile_variables") = r.maxTileVariables,
                        py::arg("num_variables") = r.numVariables,
                        py::arg("num_vertices") = r.numVertices,
                        py::arg("num_compute_sets") = r.numComputeSets,
                        py::arg("num_copy_regions") = r.numRegions);
      },
      py::arg("layers"), py::arg("batch_size"), py::arg("num_steps"), py::arg("input_capacity"),
      py::arg("fused") = false,
        "Builds a network's training step (each layer's forward and grad op, as PopART would "
        "place them) on the host graph and reports its tiles; see Report.hpp. fused=True also "
        "builds it as one pipelined program (the fused time loop) and measures its steps.");

  // ------------------------------------------------------------ the graph API

  py::class_<poplar::Tensor>(m, "Tensor")
      .def_property_readonly("shape", [](const poplar::Tensor &t) { return t.shape(); })
      .def_property_readonly("dtype", [](const poplar::Tensor &t) { return t.elementType().toString(); })
      .def("num_elements", &poplar::Tensor::numElements)
      .def("__getitem__", [](const poplar::Tensor &t, std::size_t i) { return t[i]; })
      .def("slice", [](const poplar::Tensor &t, std::size_t b, std::size_t e, unsigned d) {
             return t.slice(b, e, d);
           }, py::arg("begin"), py::arg("end"), py::arg("dim") = 0)
      .def("reshape", [](const poplar::Tensor &t, std::vector<std::size_t> s) { return t.reshape(s); })
      .def("dim_shuffle", [](const poplar::Tensor &t, std::vector<unsigned> p) { return t.dimShuffle(p); })
      .def("transpose", &poplar::Tensor::transpose)
      .def("flatten", [](const poplar::Tensor &t) { return t.flatten(); })
      .def("expand", [](const poplar::Tensor &t, std::vector<std::size_t> i) { return t.expand(i); })
      .def("squeeze", [](const poplar::Tensor &t, std::vector<std::size_t> d) { return t.squeeze(d); })
      .def("reinterpret", [](const poplar::Tensor &t, const std::string &type) {
             return t.reinterpret(typeFromName(type));
           })
      .def("broadcast", &poplar::Tensor::broadcast, py::arg("n"), py::arg("dim"))
      .def("num_regions", [](const poplar::Tensor &t) { return t.hostView().regions.size(); });
  m.def("concat", [](const std::vector<poplar::Tensor> &ts, unsigned dim) {
    return poplar::concat(ts, dim);
  }, py::arg("tensors"), py::arg("dim") = 0);

  py::class_<poplar::ComputeSet>(m, "ComputeSet");
  py::class_<Vertex>(m, "Vertex");
  py::class_<poplar::program::Program>(m, "Program");
  py::class_<poplar::program::Sequence, poplar::program::Program>(m, "Sequence")
      .def(py::init<>())
      .def("add", &poplar::program::Sequence::add);
  m.def("Execute", [](const poplar::ComputeSet &cs) -> poplar::program::Program {
    return poplar::program::Execute(cs);
  });
  m.def("Repeat", [](unsigned n, const poplar::program::Program &p) -> poplar::program::Program {
    return poplar::program::Repeat(n, p);
  });
  m.def("Copy", [](const poplar::Tensor &src, const poplar::Tensor &dst) -> poplar::program::Program {
    return poplar::program::Copy(src, dst);
  });

  py::class_<poplar::Graph, std::shared_ptr<poplar::Graph>>(m, "Graph")
      .def(py::init([] {
        return std::make_shared<poplar::Graph>(poplar::Target::createIPUTarget(1, "ipu2"));
      }))
      .def_property_readonly("num_tiles", [](const poplar::Graph &g) { return g.getTarget().getNumTiles(); })
      .def("add_variable", [](poplar::Graph &g, const std::string &type, std::vector<std::size_t> shape,
                              const std::string &name) { return g.addVariable(typeFromName(type), shape, {name}); },
           py::arg("dtype"), py::arg("shape"), py::arg("name") = "")
      .def("add_constant", [](poplar::Graph &g, const std::string &type, std::vector<std::size_t> shape,
                              double value, const std::string &name) {
             return g.addConstant<double>(typeFromName(type), shape, value, {name});
           }, py::arg("dtype"), py::arg("shape"), py::arg("value"), py::arg("name") = "")
      .def("set_tile_mapping", [](poplar::Graph &g, const poplar::Tensor &t, unsigned tile) {
             g.setTileMapping(t, tile);
           })
      .def("set_tile_mapping", [](poplar::Graph &g, const Vertex &v, unsigned tile) {
             g.setTileMapping(v.ref, tile);
           })
      .def("map_linearly", [](poplar::Graph &g, const poplar::Tensor &t) { poputil::mapTensorLinearly(g, t); })
      .def("create_op_input", [](poplar::Graph &g, const std::string &op, const py::dict &attributes,
                                 const std::vector<std::pair<std::string, std::vector<std::size_t>>> &inputs,
                                 int index) {
             ForwardSpecs specs;
             for (const auto &spec : inputs)
               specs.push_back({typeFromName(spec.first), spec.second});
             return createOpInput(op, g, toAttributes(attributes), specs, index,
                                  "input" + std::to_string(index));
           }, py::arg("op"), py::arg("attributes"), py::arg("inputs"), py::arg("index"),
           "An input of a forward op (inputs: (dtype, shape) of each), laid out as PopART lays out "
           "one no other op laid out: by the op where it can create it (its weights), else linearly.")
      .def("tile_mapping", [](const poplar::Graph &g, const poplar::Tensor &t) {
             std::vector<std::vector<std::pair<std::size_t, std::size_t>>> out;
             for (const auto &tile : g.getTileMapping(t, false)) {
               out.emplace_back();
               for (const auto &iv : tile)
                 out.back().emplace_back(iv.begin(), iv.end());
             }
             return out;
           })
      .def("add_compute_set", [](poplar::Graph &g, const std::string &name) { return g.addComputeSet({name}); },
           py::arg("name") = "")
      .def("add_vertex", [](std::shared_ptr<poplar::Graph> g, const poplar::ComputeSet &cs,
                            const std::string &type, const py::dict &connections) {
             Vertex v{g, g->addVertex(cs, type)};
             for (const auto &kv : connections)
               connect(*g, v, py::cast<std::string>(kv.first), py::reinterpret_borrow<py::object>(kv.second));
             return v;
           }, py::arg("cs"), py::arg("type"), py::arg("connections") = py::dict())
      .def("connect", [](poplar::Graph &g, const Vertex &v, const std::string &field, const py::object &what) {
             connect(g, v, field, what);
           })
      .def("set_initial_value", [](poplar::Graph &g, const Vertex &v, const std::string &field, const py::object &value) {
             if (py::isinstance<py::float_>(value))
               g.setInitialValue(v.ref[field], py::cast<float>(value));
             else
               g.setInitialValue(v.ref[field], py::cast<long long>(value));
           })
      .def("set_perf_estimate", [](poplar::Graph &g, const Vertex &v, std::uint64_t cycles) {
             g.setPerfEstimate(v.ref, cycles);
           })
      .def("zero", [](poplar::Graph &g, const poplar::Tensor &t, poplar::program::Sequence &seq) {
             popops::zero(g, t, seq);
           })
      .def("create_host_write", [](poplar::Graph &g, const std::string &h, const poplar::Tensor &t) {
             g.createHostWrite(h, t);
           })
      .def("create_host_read", [](poplar::Graph &g, const std::string &h, const poplar::Tensor &t) {
             g.createHostRead(h, t);
           });

  struct PyEngine {
    std::shared_ptr<poplar::Graph> graph;
    std::unique_ptr<poplar::Engine> engine;
  };
  py::class_<PyEngine>(m, "Engine")
      .def(py::init([](std::shared_ptr<poplar::Graph> g, const poplar::program::Program &p,
                       bool checkOutputReads) {
             return PyEngine{g, std::make_unique<poplar::Engine>(
                                    *g, p, poplar::OptionFlags{{"debug.checkOutputReads",
                                                                checkOutputReads ? "true" : "false"}})};
           }), py::arg("graph"), py::arg("program"), py::arg("check_output_reads") = true)
      .def("run", [](PyEngine &e) { e.engine->run(); })
      .def("write", [](PyEngine &e, const std::string &handle, const py::array &a) {
             const HostArray h = toHost(a);
             e.engine->writeTensor(handle, h.data.data(), h.data.data() + h.data.size());
           })
      .def("read", [](PyEngine &e, const std::string &handle) {
             const poplar::Tensor &t = e.graph->hostModel().hostReads.at(handle);
             HostArray h;
             h.type = t.elementType();
             h.shape = t.shape();
             h.data.resize(t.numElements() * typeSize(h.type));
             e.engine->readTensor(handle, h.data.data(), h.data.data() + h.data.size());
             return toNumpy(h);
           });
}
