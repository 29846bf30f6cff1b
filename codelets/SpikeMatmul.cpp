// popc translation unit; the host build includes the header directly.
#include "SpikeMatmul.hpp"

template class SpikeMatmul<float>;
template class SpikeMatmul<half>;
template class SpikeMatmulParts<float>;
template class SpikeMatmulParts<half>;
