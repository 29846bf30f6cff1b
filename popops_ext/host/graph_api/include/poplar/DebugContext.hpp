// Host implementation of poplar/DebugContext.hpp. The host keeps only the
// path of names ("layer/op/name"), which its errors and reports print; the
// SDK also records source locations and profile debug information.
#pragma once

#include <cstdint>
#include <string>

#include <poplar/StringRef.hpp>

namespace poplar {

using DebugId = std::uint64_t;
class DebugInfo;

class DebugNameAndId {
public:
  DebugNameAndId(std::string name = "", DebugId debugId = 0, std::string parentPath = "");
  DebugNameAndId(const char *name);
  DebugNameAndId(const DebugInfo &debugInfo, std::string name = "");
  DebugNameAndId(const DebugNameAndId &parent, std::string name);
  DebugNameAndId(const DebugNameAndId &) = default;
  DebugNameAndId &operator=(const DebugNameAndId &) = default;

  std::string getPathName() const;
  DebugId getId() const { return id_; }

private:
  std::string name_, parentPath_;
  DebugId id_ = 0;
};

class DebugContext {
public:
  DebugContext(std::string name = "");
  DebugContext(const char *name);
  DebugContext(const DebugInfo &debugInfo, std::string name = "");
  DebugContext(const DebugNameAndId &debugNameAndId, std::string name = "");
  DebugContext(const DebugContext &) = default;

  std::string getPathName() const;
  DebugId getId() const { return parentId_; }

private:
  std::string name_, parentPath_;
  DebugId parentId_ = 0;
};

class DebugInfo {
public:
  DebugInfo(const DebugContext &debugContext, std::string layer);
  virtual ~DebugInfo() = default;
  DebugInfo(const DebugInfo &) = delete;
  DebugInfo &operator=(const DebugInfo &) = delete;

  std::string getPathName() const { return path_; }
  DebugId getId() const { return id_; }

private:
  std::string path_;
  DebugId id_;
};

} // namespace poplar
