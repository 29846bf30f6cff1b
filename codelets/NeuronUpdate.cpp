// popc translation unit; the host build includes the header directly.
#include "NeuronUpdate.hpp"
