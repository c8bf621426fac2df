// mpsrt/dtype.h: the one table of element types every layer reads.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

#include "mpsrt/c_api.h"
#include "mpsrt/dtype.h"

namespace {

using mpsrt::DLPackCode;
using mpsrt::DType;
using mpsrt::RandomOp;

// Each dtype as numpy / torch know it: name, bytes, DLPack code, significand digits.
struct Expect {
  DType d;
  const char* name;
  size_t size;
  DLPackCode code;
  int digits;
};
constexpr Expect kExpect[] = {
    {DType::U8, "uint8", 1, DLPackCode::UInt, 0},
    {DType::I32, "int32", 4, DLPackCode::Int, 0},
    {DType::I64, "int64", 8, DLPackCode::Int, 0},
    {DType::U32, "uint32", 4, DLPackCode::UInt, 0},
    {DType::F16, "float16", 2, DLPackCode::Float, 11},
    {DType::BF16, "bfloat16", 2, DLPackCode::BFloat, 8},
    {DType::F32, "float32", 4, DLPackCode::Float, std::numeric_limits<float>::digits},
    {DType::F64, "float64", 8, DLPackCode::Float, std::numeric_limits<double>::digits},
    {DType::Bool, "bool", 1, DLPackCode::Bool, 0},
    {DType::I8, "int8", 1, DLPackCode::Int, 0},
    {DType::I16, "int16", 2, DLPackCode::Int, 0},
    {DType::U16, "uint16", 2, DLPackCode::UInt, 0},
    {DType::U64, "uint64", 8, DLPackCode::UInt, 0},
};

TEST(DType, EveryDTypeHasItsSizeNameCodeAndDigits) {
  static_assert(sizeof(kExpect) / sizeof(kExpect[0]) == mpsrt::kDTypeCount, "every dtype");
  for (const Expect& e : kExpect) {
    SCOPED_TRACE(e.name);
    ASSERT_TRUE(mpsrt::dtype_valid(e.d));
    EXPECT_STREQ(mpsrt::dtype_name(e.d), e.name);
    EXPECT_EQ(mpsrt::dtype_size(e.d), e.size);
    EXPECT_EQ(mpsrt::dtype_info(e.d).code, e.code);
    EXPECT_EQ(mpsrt::dtype_info(e.d).digits, e.digits);
    EXPECT_EQ(mpsrt::dtype_is_float(e.d), e.digits != 0);
    DType back = DType::U8;
    ASSERT_TRUE(mpsrt::dtype_from_name(e.name, &back));
    EXPECT_EQ(back, e.d);
  }
  DType d = DType::U8;
  EXPECT_FALSE(mpsrt::dtype_from_name("float", &d));
  EXPECT_FALSE(mpsrt::dtype_from_name("", &d));
  EXPECT_FALSE(mpsrt::dtype_valid(static_cast<DType>(mpsrt::kDTypeCount)));
  EXPECT_EQ(mpsrt::dtype_name(static_cast<DType>(200)), nullptr);
}

TEST(DType, IntegerBoundsAreTheTypesRangeOrItsExactIntegers) {
  auto bounds = [](DType d) {
    return std::make_pair(mpsrt::dtype_info(d).int_min, mpsrt::dtype_info(d).int_max);
  };
  EXPECT_EQ(bounds(DType::U8), std::make_pair(int64_t(0), uint64_t(256)));
  EXPECT_EQ(bounds(DType::I8), std::make_pair(int64_t(-128), uint64_t(128)));
  EXPECT_EQ(bounds(DType::I16), std::make_pair(int64_t(-32768), uint64_t(32768)));
  EXPECT_EQ(bounds(DType::U16), std::make_pair(int64_t(0), uint64_t(65536)));
  EXPECT_EQ(bounds(DType::I32), std::make_pair(int64_t(INT32_MIN), uint64_t(1) << 31));
  EXPECT_EQ(bounds(DType::U32), std::make_pair(int64_t(0), uint64_t(1) << 32));
  EXPECT_EQ(bounds(DType::I64), std::make_pair(INT64_MIN, uint64_t(1) << 63));
  EXPECT_EQ(bounds(DType::U64), std::make_pair(int64_t(0), uint64_t(1) << 63));  // torch's
  EXPECT_EQ(bounds(DType::Bool), std::make_pair(int64_t(0), uint64_t(2)));
  for (DType d : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    const int digits = mpsrt::dtype_info(d).digits;
    EXPECT_EQ(bounds(d), std::make_pair(-(int64_t(1) << digits), (uint64_t(1) << digits) + 1))
        << mpsrt::dtype_info(d).name;
  }
}

TEST(DType, WhichRandomOpWritesWhichDType) {
  for (int i = 0; i < mpsrt::kDTypeCount; ++i) {
    const auto d = static_cast<DType>(i);
    SCOPED_TRACE(mpsrt::dtype_info(d).name);
    EXPECT_EQ(mpsrt::random_supported(RandomOp::Bits, d), d == DType::U32);
    EXPECT_EQ(mpsrt::random_supported(RandomOp::Uniform, d), mpsrt::dtype_is_float(d));
    EXPECT_EQ(mpsrt::random_supported(RandomOp::Normal, d), mpsrt::dtype_is_float(d));
    EXPECT_TRUE(mpsrt::random_supported(RandomOp::IntRange, d));
    EXPECT_EQ(mpsrt::random_supported(RandomOp::Bernoulli, d),
              d != DType::U16 && d != DType::U32 && d != DType::U64);
    EXPECT_FALSE(mpsrt::random_supported(static_cast<RandomOp>(9), d));
  }
  EXPECT_FALSE(mpsrt::random_supported(RandomOp::IntRange, static_cast<DType>(13)));
  EXPECT_EQ(mpsrt::random_words_per_element(RandomOp::Uniform, DType::F64, false), 2u);
  EXPECT_EQ(mpsrt::random_words_per_element(RandomOp::Uniform, DType::F32, false), 1u);
  EXPECT_EQ(mpsrt::random_words_per_element(RandomOp::IntRange, DType::I64, true), 2u);
  EXPECT_EQ(mpsrt::random_words_per_element(RandomOp::IntRange, DType::I64, false), 1u);
  EXPECT_STREQ(mpsrt::random_op_name(RandomOp::IntRange), "int");
  EXPECT_EQ(mpsrt::random_op_name(static_cast<RandomOp>(5)), nullptr);
}

TEST(DType, TheCApiNamesAreTheSameValues) {
  EXPECT_EQ(MPSRT_DTYPE_BFLOAT16, static_cast<int>(DType::BF16));
  EXPECT_EQ(MPSRT_DTYPE_UINT64 + 1, mpsrt::kDTypeCount);
  EXPECT_EQ(MPSRT_RANDOM_INT_RANGE, static_cast<int>(RandomOp::IntRange));
  EXPECT_EQ(MPSRT_RANDOM_BERNOULLI + 1, mpsrt::kRandomOpCount);
}

}  // namespace
