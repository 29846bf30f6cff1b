// Host implementation of poplar/SourceLocation.hpp: where in the source a
// DebugContext was made (the caller's function, file and line, through the
// compiler's location builtins). PopART's Opx takes one in debugContext();
// the host keeps it but its reports print only the path of names.
#pragma once

namespace poplar {

class SourceLocation {
public:
  constexpr SourceLocation() = default;
  constexpr SourceLocation(const char *functionName, const char *fileName, unsigned lineNumber)
      : functionName_(functionName), fileName_(fileName), lineNumber_(lineNumber), valid_(true) {}

  constexpr const char *getFunctionName() const { return functionName_; }
  constexpr const char *getFileName() const { return fileName_; }
  constexpr unsigned getLineNumber() const { return lineNumber_; }
  constexpr bool isValid() const { return valid_; }

  static constexpr SourceLocation Current(const char *functionName = __builtin_FUNCTION(),
                                          const char *fileName = __builtin_FILE(),
                                          unsigned lineNumber = __builtin_LINE()) {
    return {functionName, fileName, lineNumber};
  }

private:
  const char *functionName_ = "<unknown>";
  const char *fileName_ = "<unknown>";
  unsigned lineNumber_ = 0;
  bool valid_ = false;
};

} // namespace poplar
