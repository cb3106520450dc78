#define X(a) #a
#if defined(X) && 1
#pragma once
#else
#error no
#endif
const char *s = "#include </etc/passwd>"; // #include "x"
