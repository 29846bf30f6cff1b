// popc translation unit; the host build includes the header directly.
#include "WeightGrad.hpp"

template class InputSpikeGrad<float>;
template class InputSpikeGrad<half>;
template class InputSpikeGradRange<float>;
template class InputSpikeGradRange<half>;
