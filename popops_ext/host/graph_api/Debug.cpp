// Debug names: the host keeps the path of names for its errors and reports.
#include <poplar/DebugContext.hpp>

#include <atomic>

namespace poplar {

namespace {
DebugId nextId() {
  static std::atomic<DebugId> id{1};
  return id++;
}
std::string join(const std::string &parent, const std::string &name) {
  if (parent.empty())
    return name;
  if (name.empty())
    return parent;
  return parent + "/" + name;
}
} // namespace

DebugNameAndId::DebugNameAndId(std::string name, DebugId debugId, std::string parentPath)
    : name_(std::move(name)), parentPath_(std::move(parentPath)), id_(debugId) {}
DebugNameAndId::DebugNameAndId(const char *name) : name_(name ? name : "") {}
DebugNameAndId::DebugNameAndId(const DebugInfo &debugInfo, std::string name)
    : name_(std::move(name)), parentPath_(debugInfo.getPathName()), id_(debugInfo.getId()) {}
DebugNameAndId::DebugNameAndId(const DebugNameAndId &parent, std::string name)
    : name_(std::move(name)), parentPath_(parent.getPathName()), id_(parent.getId()) {}
std::string DebugNameAndId::getPathName() const { return join(parentPath_, name_); }

DebugContext::DebugContext(SourceLocation loc) : location_(loc) {}
DebugContext::DebugContext(std::string name, SourceLocation loc)
    : name_(std::move(name)), location_(loc) {}
DebugContext::DebugContext(const char *name, SourceLocation loc)
    : name_(name ? name : ""), location_(loc) {}
DebugContext::DebugContext(const DebugInfo &debugInfo, std::string name, SourceLocation loc)
    : name_(std::move(name)), parentPath_(debugInfo.getPathName()),
      parentId_(debugInfo.getId()), location_(loc) {}
DebugContext::DebugContext(const DebugNameAndId &dnai, std::string name, SourceLocation loc)
    : name_(std::move(name)), parentPath_(dnai.getPathName()), parentId_(dnai.getId()),
      location_(loc) {}
std::string DebugContext::getPathName() const { return join(parentPath_, name_); }

DebugInfo::DebugInfo(const DebugContext &debugContext, std::string)
    : path_(debugContext.getPathName()), id_(nextId()) {}

} // namespace poplar
