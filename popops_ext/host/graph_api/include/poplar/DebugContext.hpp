// Host implementation of poplar/DebugContext.hpp. The host keeps only the
// path of names ("layer/op/name"), which its errors and reports print; the
// SDK also records the source location (taken here, as the SDK's signatures
// take it, and kept) and profile debug information.
#pragma once

#include <cstdint>
#include <string>

#include <poplar/ProfileValue.hpp>
#include <poplar/SourceLocation.hpp>
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
  DebugContext(SourceLocation loc = SourceLocation::Current());
  DebugContext(std::string name, SourceLocation loc = SourceLocation::Current());
  DebugContext(const char *name, SourceLocation loc = SourceLocation::Current());
  DebugContext(const DebugInfo &debugInfo, std::string name = "",
               SourceLocation loc = SourceLocation::Current());
  DebugContext(const DebugNameAndId &debugNameAndId, std::string name = "",
               SourceLocation loc = SourceLocation::Current());
  DebugContext(const DebugContext &) = default;

  std::string getPathName() const;
  DebugId getId() const { return parentId_; }
  const SourceLocation &getLocation() const { return location_; }

private:
  std::string name_, parentPath_;
  DebugId parentId_ = 0;
  SourceLocation location_;
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
