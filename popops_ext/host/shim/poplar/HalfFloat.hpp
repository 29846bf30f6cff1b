// Host stand-in for poplar/HalfFloat.hpp: IEEE binary16 storage with float
// arithmetic, which g++ on x86-64 provides natively (F16C converts it).
#pragma once

using half = _Float16;
