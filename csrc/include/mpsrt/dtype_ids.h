/** \file
 * mpsrt's element type ids: the one list that C (mpsrt/c_api.h's MpsrtDType), C++
 * (mpsrt/dtype.h's DType) and the GLSL kernels (csrc/kernels/common.glsl's DT_*) take their
 * values from. Plain preprocessor definitions, valid in all three. The values are stable. */
#ifndef MPSRT_DTYPE_IDS_H
#define MPSRT_DTYPE_IDS_H

#define MPSRT_DTYPE_ID_UINT8 0    /**< uint8 */
#define MPSRT_DTYPE_ID_INT32 1    /**< int32 */
#define MPSRT_DTYPE_ID_INT64 2    /**< int64 */
#define MPSRT_DTYPE_ID_UINT32 3   /**< uint32 */
#define MPSRT_DTYPE_ID_FLOAT16 4  /**< float16 */
#define MPSRT_DTYPE_ID_BFLOAT16 5 /**< bfloat16 */
#define MPSRT_DTYPE_ID_FLOAT32 6  /**< float32 */
#define MPSRT_DTYPE_ID_FLOAT64 7  /**< float64 */
#define MPSRT_DTYPE_ID_BOOL 8     /**< bool */
#define MPSRT_DTYPE_ID_INT8 9     /**< int8 */
#define MPSRT_DTYPE_ID_INT16 10   /**< int16 */
#define MPSRT_DTYPE_ID_UINT16 11  /**< uint16 */
#define MPSRT_DTYPE_ID_UINT64 12  /**< uint64 */
#define MPSRT_DTYPE_ID_COUNT 13   /**< the number of ids: a new dtype takes this value */

#endif
