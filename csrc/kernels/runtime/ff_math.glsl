// Float-float arithmetic for random.comp's float32 normals without float64 (the form Metal
// runs, and vulkan for every dtype but float64): a value is vec2(hi, lo) with |lo| <= ulp(hi) / 2,
// about 48 significant bits. Every operation is `precise` (no fused multiply-add, no
// reassociation: SPIR-V NoContraction, which SPIRV-Cross keeps in MSL), so each rounds once;
// division and sqrt need not be correctly rounded (Vulkan's are not): a correction step follows.
// log, sin / cos and sqrt to about 2^-48 relative, rounded once to float: the correctly rounded
// float but within about 2^-24 of an ulp of a rounding tie.

vec2 ff_two_sum(float a, float b) {
  precise float s = a + b;
  precise float bb = s - a;
  precise float e = (a - (s - bb)) + (b - bb);
  return vec2(s, e);
}

vec2 ff_fast_two_sum(float a, float b) {
  precise float s = a + b;
  precise float e = b - (s - a);
  return vec2(s, e);
}

// a = hi + lo exactly, each half with at most 12 significant bits (Veltkamp's split).
vec2 ff_split(float a) {
  precise float t = 4097.0 * a;
  precise float hi = t - (t - a);
  precise float lo = a - hi;
  return vec2(hi, lo);
}

// a * b = p + e exactly (Dekker's product: plain multiplies and adds, which Vulkan and Metal
// round correctly, where Vulkan's fma() need not be fused).
vec2 ff_two_prod(float a, float b) {
  precise float p = a * b;
  const vec2 x = ff_split(a), y = ff_split(b);
  precise float e = ((x.x * y.x - p) + x.x * y.y + x.y * y.x) + x.y * y.y;
  return vec2(p, e);
}

vec2 ff_add(vec2 x, vec2 y) {
  const vec2 s = ff_two_sum(x.x, y.x);
  precise float t = s.y + (x.y + y.y);
  return ff_fast_two_sum(s.x, t);
}

vec2 ff_mul(vec2 x, vec2 y) {
  const vec2 p = ff_two_prod(x.x, y.x);
  precise float t = p.y + (x.x * y.y + x.y * y.x);
  return ff_fast_two_sum(p.x, t);
}

vec2 ff_neg(vec2 x) {
  return vec2(-x.x, -x.y);
}

vec2 ff_div(vec2 x, vec2 y) {
  precise float q1 = x.x / y.x;
  vec2 r = ff_add(x, ff_neg(ff_mul(y, vec2(q1, 0.0))));
  precise float q2 = r.x / y.x;
  r = ff_add(r, ff_neg(ff_mul(y, vec2(q2, 0.0))));
  precise float q3 = r.x / y.x;
  return ff_add(ff_fast_two_sum(q1, q2), vec2(q3, 0.0));
}

// p * s2 + c for a Horner step of a series.
vec2 ff_horner(vec2 p, vec2 s2, float c_hi, float c_lo) {
  return ff_add(ff_mul(p, s2), vec2(c_hi, c_lo));
}

// log x for a normal float x > 0: x = f 2^e with f in [sqrt(1/2), sqrt(2)),
// log f = 2 atanh(s), s = (f - 1) / (f + 1), |s| < 0.172.
vec2 ff_log(float x) {
  int e;
  float f = frexp(x, e);
  if (f < 0.70710678) {
    f *= 2.0;
    e -= 1;
  }
  precise float fm1 = f - 1.0;  // exact (Sterbenz)
  const vec2 s = ff_div(vec2(fm1, 0.0), ff_two_sum(f, 1.0));
  const vec2 s2 = ff_mul(s, s);
  // 1/23, 1/21, ..., 1/3 as float-float.
  vec2 p = vec2(0.043478261679410934, -8.098457460192776e-10);
  p = ff_horner(p, s2, 0.0476190485060215, -8.869738832295582e-10);
  p = ff_horner(p, s2, 0.05263157933950424, -3.9213582381236733e-10);
  p = ff_horner(p, s2, 0.05882352963089943, -2.1913472425527658e-10);
  p = ff_horner(p, s2, 0.06666667014360428, -3.47693762670076e-09);
  p = ff_horner(p, s2, 0.07692307978868484, -2.8656079731348427e-09);
  p = ff_horner(p, s2, 0.09090909361839294, -2.709302115988521e-09);
  p = ff_horner(p, s2, 0.1111111119389534, -8.278422947149977e-10);
  p = ff_horner(p, s2, 0.1428571492433548, -6.38621200366174e-09);
  p = ff_horner(p, s2, 0.20000000298023224, -2.9802322831784522e-09);
  p = ff_horner(p, s2, 0.3333333432674408, -9.934107758624577e-09);
  const vec2 two_s = vec2(2.0 * s.x, 2.0 * s.y);  // exact
  const vec2 lf = ff_add(two_s, ff_mul(ff_mul(two_s, s2), p));
  const vec2 ln2 = vec2(0.6931471824645996, -1.9046542121259336e-09);
  return ff_add(ff_mul(vec2(float(e), 0.0), ln2), lf);
}

// sin (xy) and cos (zw) of t in [0, 8): t = k pi/2 + r with |r| <= pi/4 (pi/2 in three parts,
// the first with 16 bits so that k times it is exact), then Taylor series in r.
vec4 ff_sincos(float t) {
  const float k = roundEven(t * 0.63661975);
  precise float head = t - k * 1.570770263671875;  // exact
  vec2 r = ff_add(vec2(head, 0.0), ff_neg(ff_two_prod(k, 2.6063122277264483e-05)));
  r = ff_add(r, ff_neg(ff_two_prod(k, 7.443547731314504e-13)));
  const vec2 r2 = ff_mul(r, r);
  // Odd terms -1/19!, 1/17!, ..., -1/3!; even terms 1/20!, -1/18!, ..., 1/4! (Horner).
  vec2 ps = vec2(-8.220635078476521e-18, -1.681478096855898e-25);
  ps = ff_horner(ps, r2, 2.8114573589663704e-15, -1.0462084739763658e-22);
  ps = ff_horner(ps, r2, -7.647163609812713e-13, -1.2200710471178288e-20);
  ps = ff_horner(ps, r2, 1.6059044372074283e-10, -5.352526511562726e-18);
  ps = ff_horner(ps, r2, -2.5052107943679403e-08, -4.4176230446483665e-16);
  ps = ff_horner(ps, r2, 2.7557318844628753e-06, 3.793571224297229e-14);
  ps = ff_horner(ps, r2, -0.00019841270113829523, 2.725596874933456e-12);
  ps = ff_horner(ps, r2, 0.008333333767950535, -4.34617203337595e-10);
  ps = ff_horner(ps, r2, -0.1666666716337204, 4.967053879312289e-09);
  vec2 pc_ = vec2(4.110317590937049e-19, 3.237511732860265e-27);
  pc_ = ff_horner(pc_, r2, -1.5619206814541513e-16, -1.5404471465941993e-24);
  pc_ = ff_horner(pc_, r2, 4.7794772561329454e-14, 7.62544404448643e-22);
  pc_ = ff_horner(pc_, r2, -1.147074536050896e-11, -2.372207689231238e-19);
  pc_ = ff_horner(pc_, r2, 2.0876755879584152e-09, 1.1082839809204342e-16);
  pc_ = ff_horner(pc_, r2, -2.755731998149713e-07, 7.575112209051195e-15);
  pc_ = ff_horner(pc_, r2, 2.4801587642286904e-05, -3.40699609366682e-13);
  pc_ = ff_horner(pc_, r2, -0.0013888889225199819, 3.3631094437103215e-11);
  pc_ = ff_horner(pc_, r2, 0.0416666679084301, -1.2417634698280722e-09);
  const vec2 sn = ff_add(r, ff_mul(ff_mul(r, r2), ps));
  const vec2 half_r2 = vec2(0.5 * r2.x, 0.5 * r2.y);  // exact
  const vec2 cs = ff_add(ff_add(vec2(1.0, 0.0), ff_neg(half_r2)), ff_mul(ff_mul(r2, r2), pc_));
  const uint q = uint(int(k)) & 3u;
  if (q == 0u) return vec4(sn, cs);
  if (q == 1u) return vec4(cs, ff_neg(sn));
  if (q == 2u) return vec4(ff_neg(sn), ff_neg(cs));
  return vec4(ff_neg(cs), sn);
}

// sqrt of m > 0 to about 2^-48 (one correction step from the float root), rounded to float.
float ff_sqrt_f(float m) {
  const float r0 = sqrt(m);
  if (r0 == 0.0) return r0;
  const vec2 res = ff_add(vec2(m, 0.0), ff_neg(ff_two_prod(r0, r0)));
  const vec2 r = ff_fast_two_sum(r0, res.x / (2.0 * r0));
  return r.x;
}
