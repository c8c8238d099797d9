// The constants of the vector e^x (avx2::Exp, avx512::Exp; one polynomial, so the two ISAs
// agree): Cody-Waite reduction x = n·ln2 + r with ln2 split in two, then a degree-6 polynomial
// e^r ≈ 1 + r + r²·P(r), P's coefficients from the highest power down.
#pragma once

namespace cpm::kernels::exp_poly {

constexpr float kLo = -87.33654f;  // below: 0 (expf gives a denormal, < 1e-38 away)
constexpr float kHi = 88.3762626647949f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                         4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

}  // namespace cpm::kernels::exp_poly
