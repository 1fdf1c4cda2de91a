/* spirv.h — a small SPIR-V module writer (spirv.c): the words of one module
 * in the OpenCL Kernel execution model (Addresses, Kernel, Int64;
 * Physical64 addressing, OpenCL memory model), built section by section.
 *
 * Ids are allocated in order; types and constants are interned (asking for
 * the same one twice gives the same id). Instructions go into the section
 * buffers in the order the SPIR-V spec's logical layout requires;
 * spv_finish concatenates them behind the header. The opcode, enum and
 * OpenCL.std numbers used by smelt are declared here (SPIR-V 1.2
 * specification, unified 1.6 registry numbers; OpenCL.std extended
 * instruction set 1.0).
 */
#ifndef SMELT_SPIRV_SPIRV_H
#define SMELT_SPIRV_SPIRV_H

#include <stddef.h>
#include <stdint.h>

/* Opcodes (SPIR-V specification, section 3.49 "Instructions"). */
enum {
    SpvOpName = 5, SpvOpExtInstImport = 11, SpvOpExtInst = 12, SpvOpMemoryModel = 14,
    SpvOpEntryPoint = 15, SpvOpExecutionMode = 16, SpvOpCapability = 17,
    SpvOpTypeVoid = 19, SpvOpTypeBool = 20, SpvOpTypeInt = 21, SpvOpTypeFloat = 22,
    SpvOpTypeVector = 23, SpvOpTypeArray = 28, SpvOpTypePointer = 32, SpvOpTypeFunction = 33,
    SpvOpConstantTrue = 41, SpvOpConstantFalse = 42, SpvOpConstant = 43,
    SpvOpFunction = 54, SpvOpFunctionParameter = 55, SpvOpFunctionEnd = 56,
    SpvOpVariable = 59, SpvOpLoad = 61, SpvOpStore = 62, SpvOpInBoundsPtrAccessChain = 70,
    SpvOpAccessChain = 65, SpvOpPtrAccessChain = 67, SpvOpDecorate = 71, SpvOpCompositeExtract = 81,
    SpvOpConvertFToU = 109, SpvOpConvertFToS = 110, SpvOpConvertSToF = 111, SpvOpConvertUToF = 112,
    SpvOpUConvert = 113, SpvOpSConvert = 114, SpvOpFConvert = 115, SpvOpBitcast = 124,
    SpvOpSNegate = 126, SpvOpFNegate = 127, SpvOpIAdd = 128, SpvOpFAdd = 129, SpvOpISub = 130,
    SpvOpFSub = 131, SpvOpIMul = 132, SpvOpFMul = 133, SpvOpUDiv = 134, SpvOpSDiv = 135,
    SpvOpFDiv = 136, SpvOpUMod = 137, SpvOpSRem = 138, SpvOpFRem = 140,
    SpvOpIsNan = 156, SpvOpIsInf = 157,
    SpvOpLogicalEqual = 164, SpvOpLogicalNotEqual = 165, SpvOpLogicalOr = 166, SpvOpLogicalAnd = 167,
    SpvOpLogicalNot = 168, SpvOpSelect = 169, SpvOpIEqual = 170, SpvOpINotEqual = 171,
    SpvOpUGreaterThan = 172, SpvOpSGreaterThan = 173, SpvOpUGreaterThanEqual = 174,
    SpvOpSGreaterThanEqual = 175, SpvOpULessThan = 176, SpvOpSLessThan = 177,
    SpvOpULessThanEqual = 178, SpvOpSLessThanEqual = 179, SpvOpFOrdEqual = 180,
    SpvOpFUnordNotEqual = 183, SpvOpFOrdNotEqual = 182, SpvOpFOrdLessThan = 184,
    SpvOpFOrdGreaterThan = 186, SpvOpFOrdLessThanEqual = 188, SpvOpFOrdGreaterThanEqual = 190,
    SpvOpShiftRightLogical = 194, SpvOpShiftRightArithmetic = 195, SpvOpShiftLeftLogical = 196,
    SpvOpBitwiseOr = 197, SpvOpBitwiseXor = 198, SpvOpBitwiseAnd = 199, SpvOpNot = 200,
    SpvOpControlBarrier = 224, SpvOpAtomicOr = 241,
    SpvOpLabel = 248, SpvOpBranch = 249, SpvOpBranchConditional = 250, SpvOpReturn = 253,
};

/* Enumerants (section 3). */
enum {
    SpvCapAddresses = 4, SpvCapKernel = 6, SpvCapFloat16Buffer = 8, SpvCapFloat64 = 10, SpvCapInt64 = 11,
    SpvCapInt16 = 22, SpvCapInt8 = 39,
    SpvScInput = 1, SpvScWorkgroup = 4, SpvScCrossWorkgroup = 5, SpvScFunction = 7,
    SpvDecBuiltIn = 11, SpvDecConstant = 22, SpvDecFPRoundingMode = 39, SpvDecAlignment = 44,
    SpvBuiltInWorkgroupId = 26, SpvBuiltInLocalInvocationId = 27, SpvBuiltInGlobalInvocationId = 28,
    SpvExecModelKernel = 6, SpvExecModeLocalSize = 17, SpvExecModeContractionOff = 31,
    SpvScopeDevice = 1, SpvScopeWorkgroup = 2,
    SpvSemSeqCst = 0x10, SpvSemWorkgroupMemory = 0x100, SpvSemCrossWorkgroupMemory = 0x200,
    SpvRoundRTE = 0,
};

/* OpenCL.std extended instructions (OpenCL Extended Instruction Set
 * Specification, 2.1 "Math extended instructions"). */
enum {
    OclAcos = 0, OclAcosh = 1, OclAsin = 3, OclAsinh = 4, OclAtan = 6, OclAtan2 = 7, OclAtanh = 8,
    OclCeil = 12, OclCopysign = 13, OclCos = 14, OclCosh = 15, OclErfc = 17, OclErf = 18, OclExp = 19,
    OclExp2 = 20, OclExpm1 = 22, OclFabs = 23, OclFloor = 25, OclFma = 26, OclFmod = 29,
    OclLgamma = 35, OclLog = 37, OclLog2 = 38, OclLog10 = 39, OclLog1p = 40, OclPow = 48,
    OclRint = 53, OclRsqrt = 56, OclSin = 57, OclSinh = 59, OclSqrt = 61, OclTan = 62, OclTanh = 63,
    OclTrunc = 66, OclVloadHalf = 173, OclVstoreHalf = 175,
};

typedef struct spv_buf {
    uint32_t *w;
    size_t n, cap;
} spv_buf;

/* Interned types and constants: open addressing over (opcode, operands). */
typedef struct spv_intern {
    uint32_t *keys;     /* per entry: offset into pool (words: len, op, operands...) */
    uint32_t *ids;
    size_t cap, n;
    spv_buf pool;
} spv_intern;

typedef struct spv_mod {
    spv_buf caps, ext, memmodel, entries, modes, names, decos, globals, funcs;
    spv_intern in;
    uint32_t next_id;
    uint32_t ocl;           /* OpExtInstImport "OpenCL.std" */
    uint32_t used_caps;     /* bit per extra capability: 1 Float16Buffer, 2 Float64, 4 Int16, 8 Int8 */
    uint32_t *ty;           /* result type of each value id (0: unknown) */
    size_t tycap;
} spv_mod;

void spv_init(spv_mod *m);
void spv_free(spv_mod *m);
uint32_t spv_id(spv_mod *m);
/* The result type recorded for value id (constants record theirs). */
void spv_set_type(spv_mod *m, uint32_t id, uint32_t t);
uint32_t spv_type_of(const spv_mod *m, uint32_t id);

/* Appends instruction op with operands ops[0..n) to b. */
void spv_ins(spv_buf *b, uint32_t op, const uint32_t *ops, size_t n);
/* Appends src's words to dst. */
void spv_append(spv_buf *dst, const spv_buf *src);
/* The same with a literal string after ops (nul-terminated, padded). */
void spv_ins_str(spv_buf *b, uint32_t op, const uint32_t *ops, size_t n, const char *s);

/* Types (interned). */
uint32_t spv_t_void(spv_mod *m);
uint32_t spv_t_bool(spv_mod *m);
uint32_t spv_t_int(spv_mod *m, int bits);
uint32_t spv_t_float(spv_mod *m, int bits);
uint32_t spv_t_vec(spv_mod *m, uint32_t elem, int n);
uint32_t spv_t_ptr(spv_mod *m, uint32_t storage, uint32_t elem);
uint32_t spv_t_array(spv_mod *m, uint32_t elem, uint32_t len);
uint32_t spv_t_fn(spv_mod *m, uint32_t ret, const uint32_t *params, int n);

/* Constants (interned): integer of type t (bits from t's width), float
 * (f32 or f64 type), bool. */
uint32_t spv_c_int(spv_mod *m, uint32_t t, int bits, int64_t v);
uint32_t spv_c_float(spv_mod *m, uint32_t t, int bits, double v);
uint32_t spv_c_bool(spv_mod *m, int v);

/* A global variable (module scope) of pointer type ptr in storage sc. */
uint32_t spv_global(spv_mod *m, uint32_t ptr, uint32_t sc);
/* OpDecorate target dec [literal...]. */
void spv_decorate(spv_mod *m, uint32_t target, uint32_t dec, const uint32_t *lits, int n);
void spv_name(spv_mod *m, uint32_t target, const char *name);

/* The module's words (header, then sections): malloc'd, count in *n;
 * NULL if out of memory. */
uint32_t *spv_finish(spv_mod *m, size_t *n);

#endif
