// Test-only stand-in for Apple's <Metal/Metal.h>, for compiling the metal backend on Linux
// (.ci/metal_check.sh). It declares only what csrc/backends/metal/ uses, with the SDK's
// selectors, parameter and return types, nullability, enum names and enum values (checked
// against pyobjc-framework-Metal's metadata by .ci/metal_stubs_check). Anything else the
// backend calls fails the check, on purpose.
#pragma once

#import <Foundation/Foundation.h>

#define MTL_EXTERN extern __attribute__((visibility("default")))

NS_ASSUME_NONNULL_BEGIN

// ---------------------------------------------------------------- MTLTypes.h

typedef struct {
  NSUInteger width, height, depth;
} MTLSize;

static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
  MTLSize size = {width, height, depth};
  return size;
}

// ---------------------------------------------------------------- MTLResource.h

typedef NS_ENUM(NSUInteger, MTLCPUCacheMode) {
  MTLCPUCacheModeDefaultCache = 0,
  MTLCPUCacheModeWriteCombined = 1,
};

typedef NS_ENUM(NSUInteger, MTLStorageMode) {
  MTLStorageModeShared = 0,
  MTLStorageModeManaged = 1,
  MTLStorageModePrivate = 2,
  MTLStorageModeMemoryless = 3,
};

typedef NS_ENUM(NSUInteger, MTLHazardTrackingMode) {
  MTLHazardTrackingModeDefault = 0,
  MTLHazardTrackingModeUntracked = 1,
  MTLHazardTrackingModeTracked = 2,
};

#define MTLResourceCPUCacheModeShift 0
#define MTLResourceStorageModeShift 4
#define MTLResourceHazardTrackingModeShift 8

typedef NS_OPTIONS(NSUInteger, MTLResourceOptions) {
  MTLResourceCPUCacheModeDefaultCache = MTLCPUCacheModeDefaultCache << MTLResourceCPUCacheModeShift,
  MTLResourceCPUCacheModeWriteCombined = MTLCPUCacheModeWriteCombined
                                         << MTLResourceCPUCacheModeShift,
  MTLResourceStorageModeShared = MTLStorageModeShared << MTLResourceStorageModeShift,
  MTLResourceStorageModeManaged = MTLStorageModeManaged << MTLResourceStorageModeShift,
  MTLResourceStorageModePrivate = MTLStorageModePrivate << MTLResourceStorageModeShift,
  MTLResourceHazardTrackingModeDefault = MTLHazardTrackingModeDefault
                                         << MTLResourceHazardTrackingModeShift,
  MTLResourceHazardTrackingModeUntracked = MTLHazardTrackingModeUntracked
                                           << MTLResourceHazardTrackingModeShift,
  MTLResourceHazardTrackingModeTracked = MTLHazardTrackingModeTracked
                                         << MTLResourceHazardTrackingModeShift,
};

@protocol MTLDevice;

@protocol MTLResource <NSObject>
@end

// ---------------------------------------------------------------- MTLBuffer.h

@protocol MTLBuffer <MTLResource>
- (void*)contents NS_RETURNS_INNER_POINTER;
@end

// ---------------------------------------------------------------- MTLHeap.h

typedef NS_ENUM(NSInteger, MTLHeapType) {
  MTLHeapTypeAutomatic = 0,
  MTLHeapTypePlacement = 1,
  MTLHeapTypeSparse = 2,
};

@interface MTLHeapDescriptor : NSObject
@property(readwrite, nonatomic) NSUInteger size;
@property(readwrite, nonatomic) MTLStorageMode storageMode;
@property(readwrite, nonatomic) MTLCPUCacheMode cpuCacheMode;
@property(readwrite, nonatomic) MTLHazardTrackingMode hazardTrackingMode;
@property(readwrite, nonatomic) MTLHeapType type;
@end

@protocol MTLHeap <NSObject>
@property(nullable, copy, atomic) NSString* label;
- (nullable id<MTLBuffer>)newBufferWithLength:(NSUInteger)length
                                      options:(MTLResourceOptions)options
                                       offset:(NSUInteger)offset;
@end

// ---------------------------------------------------------------- MTLEvent.h

@protocol MTLEvent <NSObject>
@end

@interface MTLSharedEventListener : NSObject
- (instancetype)init;
@end

@protocol MTLSharedEvent;
typedef void (^MTLSharedEventNotificationBlock)(id<MTLSharedEvent>, uint64_t value);

@protocol MTLSharedEvent <MTLEvent>
- (void)notifyListener:(MTLSharedEventListener*)listener
               atValue:(uint64_t)value
                 block:(MTLSharedEventNotificationBlock)block;
@property(readwrite) uint64_t signaledValue;
@end

// ---------------------------------------------------------------- MTLArgument.h

typedef NS_ENUM(NSUInteger, MTLDataType) {
  MTLDataTypeUInt = 33,
};

// ---------------------------------------------------------------- MTLLibrary.h

@interface MTLFunctionConstantValues : NSObject
- (void)setConstantValue:(const void*)value type:(MTLDataType)type atIndex:(NSUInteger)index;
@end

@protocol MTLFunction <NSObject>
@end

@interface MTLCompileOptions : NSObject
@property(readwrite, nonatomic) BOOL fastMathEnabled;
@end

@protocol MTLLibrary <NSObject>
- (nullable id<MTLFunction>)newFunctionWithName:(NSString*)functionName;
- (nullable id<MTLFunction>)newFunctionWithName:(NSString*)name
                                 constantValues:(MTLFunctionConstantValues*)constantValues
                                          error:(__autoreleasing NSError**)error;
@end

// ---------------------------------------------------------------- MTLComputePipeline.h

@protocol MTLComputePipelineState <NSObject>
@end

// ---------------------------------------------------------------- encoders

@protocol MTLCommandEncoder <NSObject>
- (void)endEncoding;
@end

@protocol MTLBlitCommandEncoder <MTLCommandEncoder>
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value;
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
          sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destinationBuffer
     destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size;
@end

@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setBuffer:(nullable id<MTLBuffer>)buffer
           offset:(NSUInteger)offset
          atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid
       threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
@end

// ---------------------------------------------------------------- MTLCommandBuffer.h

typedef NS_ENUM(NSUInteger, MTLCommandBufferStatus) {
  MTLCommandBufferStatusNotEnqueued = 0,
  MTLCommandBufferStatusEnqueued = 1,
  MTLCommandBufferStatusCommitted = 2,
  MTLCommandBufferStatusScheduled = 3,
  MTLCommandBufferStatusCompleted = 4,
  MTLCommandBufferStatusError = 5,
};

@protocol MTLCommandBuffer;
typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer>);

@protocol MTLCommandBuffer <NSObject>
@property(nullable, copy, atomic) NSString* label;
@property(readonly) CFTimeInterval GPUStartTime;
@property(readonly) CFTimeInterval GPUEndTime;
@property(readonly) MTLCommandBufferStatus status;
@property(nullable, readonly) NSError* error;
- (void)addCompletedHandler:(MTLCommandBufferHandler)block;
- (void)commit;
- (void)encodeWaitForEvent:(id<MTLEvent>)event value:(uint64_t)value;
- (nullable id<MTLBlitCommandEncoder>)blitCommandEncoder;
- (nullable id<MTLComputeCommandEncoder>)computeCommandEncoder;
@end

// ---------------------------------------------------------------- MTLCommandQueue.h

@protocol MTLCommandQueue <NSObject>
@property(nullable, copy, atomic) NSString* label;
- (nullable id<MTLCommandBuffer>)commandBuffer;
@end

// ---------------------------------------------------------------- MTLDevice.h

typedef NS_ENUM(NSInteger, MTLGPUFamily) {
  MTLGPUFamilyApple7 = 1007,
  MTLGPUFamilyMac2 = 2002,
  MTLGPUFamilyMetal3 = 5001,
};

typedef struct {
  NSUInteger size;
  NSUInteger align;
} MTLSizeAndAlign;

@protocol MTLDevice <NSObject>
@property(nonnull, readonly) NSString* name;
@property(readonly) uint64_t registryID;
@property(readonly) BOOL hasUnifiedMemory;
@property(readonly) uint64_t recommendedMaxWorkingSetSize;
@property(readonly) NSUInteger maxBufferLength;
@property(readonly) NSUInteger currentAllocatedSize;
- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily;
- (nullable id<MTLCommandQueue>)newCommandQueue;
- (nullable id<MTLBuffer>)newBufferWithLength:(NSUInteger)length
                                      options:(MTLResourceOptions)options;
- (MTLSizeAndAlign)heapBufferSizeAndAlignWithLength:(NSUInteger)length
                                            options:(MTLResourceOptions)options;
- (nullable id<MTLHeap>)newHeapWithDescriptor:(MTLHeapDescriptor*)descriptor;
- (nullable id<MTLSharedEvent>)newSharedEvent;
- (nullable id<MTLLibrary>)newLibraryWithSource:(NSString*)source
                                        options:(nullable MTLCompileOptions*)options
                                          error:(__autoreleasing NSError**)error;
- (nullable id<MTLComputePipelineState>)
    newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                  error:(__autoreleasing NSError**)error;
@end

// ---------------------------------------------------------------- MTLCaptureManager.h

typedef NS_ENUM(NSInteger, MTLCaptureDestination) {
  MTLCaptureDestinationDeveloperTools = 1,
  MTLCaptureDestinationGPUTraceDocument = 2,
};

@interface MTLCaptureDescriptor : NSObject
@property(nonatomic, strong, nullable) id captureObject;
@property(nonatomic, assign) MTLCaptureDestination destination;
@property(nonatomic, copy, nullable) NSURL* outputURL;
@end

@interface MTLCaptureManager : NSObject
+ (MTLCaptureManager*)sharedCaptureManager;
- (BOOL)supportsDestination:(MTLCaptureDestination)destination;
- (BOOL)startCaptureWithDescriptor:(MTLCaptureDescriptor*)descriptor
                             error:(__autoreleasing NSError**)error;
- (void)stopCapture;
@property(readonly) BOOL isCapturing;
@end

MTL_EXTERN id<MTLDevice> _Nullable MTLCreateSystemDefaultDevice(void) NS_RETURNS_RETAINED;
MTL_EXTERN NSArray<id<MTLDevice>>* MTLCopyAllDevices(void) NS_RETURNS_RETAINED;

NS_ASSUME_NONNULL_END
