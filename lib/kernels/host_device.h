#ifndef TITAN_LIB_KERNELS_HOST_DEVICE_H_
#define TITAN_LIB_KERNELS_HOST_DEVICE_H_

// Per-element math that nvcc compiles into the kernels and g++ into their CPU reference loops.
#if defined(__CUDACC__)
#define TITAN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TITAN_HOST_DEVICE inline
#endif

#endif  // TITAN_LIB_KERNELS_HOST_DEVICE_H_
