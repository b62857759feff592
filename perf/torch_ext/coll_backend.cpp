// A measurement prototype, not shipped: a C++ c10d::Backend over libcollective's C API
// (all_reduce and all_gather_into_tensor only), to weigh against the Python backend
// (collective.torch) what a C++ binding saves per call. perf/torch_ext/README.md says how
// it is built and run; perf/torch_bench.py --cpp times it.
//
// Like any c10d backend on torch 2.6, it is not told async_op: each call starts the
// library's non-blocking form and its work's wait() ends it on the waiting thread
// (what a shipped backend would do). COLL_EXT_BLOCKING=1 runs the blocking form in the
// call instead and returns a finished work: the floor, correct only for async_op=False.
#include <c10/util/intrusive_ptr.h>
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

extern "C" {
#include "collective.h"
}

namespace {

coll_dtype dtype_of(const at::Tensor &t) {
    switch (t.scalar_type()) {
    case at::kFloat: return COLL_F32;
    case at::kDouble: return COLL_F64;
    case at::kHalf: return COLL_F16;
    case at::kBFloat16: return COLL_BF16;
    case at::kChar: return COLL_I8;
    case at::kByte: return COLL_U8;
    case at::kInt: return COLL_I32;
    case at::kLong: return COLL_I64;
    default: throw std::runtime_error("coll_ext: dtype not supported");
    }
}

coll_op op_of(const c10d::ReduceOp &op) {
    switch (op.op_) {
    case c10d::ReduceOp::SUM: return COLL_SUM;
    case c10d::ReduceOp::PRODUCT: return COLL_PROD;
    case c10d::ReduceOp::MIN: return COLL_MIN;
    case c10d::ReduceOp::MAX: return COLL_MAX;
    case c10d::ReduceOp::AVG: return COLL_AVG;
    case c10d::ReduceOp::BAND: return COLL_BAND; // integer dtypes: the library refuses floats
    case c10d::ReduceOp::BOR: return COLL_BOR;
    case c10d::ReduceOp::BXOR: return COLL_BXOR;
    default: throw std::runtime_error("coll_ext: reduce op not supported");
    }
}

void check(coll_comm *comm, int rc) {
    if (rc < 0)
        throw std::runtime_error(std::string("coll_ext: ") + coll_last_error(comm));
}

// The library's store callbacks over torch's c10d store (coll_init_store).
int store_set(void *ctx, const char *key, const void *value, size_t len) {
    auto *s = static_cast<c10d::Store *>(ctx);
    const auto *p = static_cast<const uint8_t *>(value);
    s->set(key, std::vector<uint8_t>(p, p + len));
    return COLL_OK;
}

int store_get(void *ctx, const char *key, void **value, size_t *len, int timeout_ms) {
    auto *s = static_cast<c10d::Store *>(ctx);
    try {
        if (timeout_ms <= 0) {
            if (!s->check({key})) return COLL_ETIMEDOUT;
        } else {
            s->wait({key}, std::chrono::milliseconds(timeout_ms));
        }
        auto v = s->get(key);
        *value = malloc(v.size() ? v.size() : 1);
        if (!*value) return COLL_ENOMEM;
        memcpy(*value, v.data(), v.size());
        *len = v.size();
        return COLL_OK;
    } catch (const std::exception &) {
        return COLL_ETIMEDOUT;
    }
}

// A request's work: wait() ends it on the waiting thread; the tensors stay alive with it.
class CollWork : public c10d::Work {
  public:
    CollWork(coll_comm *comm, coll_req *req, std::vector<at::Tensor> out)
        : comm_(comm), req_(req), out_(std::move(out)) {}
    ~CollWork() override {
        if (req_) coll_wait(req_);
    }
    bool isCompleted() override {
        if (!req_) return true;
        int done = 0;
        coll_test(req_, &done);
        return done;
    }
    bool wait(std::chrono::milliseconds) override {
        if (req_) {
            coll_req *r = req_;
            req_ = nullptr;
            check(comm_, coll_wait(r));
        }
        return true;
    }
    std::vector<at::Tensor> result() override { return out_; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
        wait({});  // the prototype settles its future in place (no completer thread)
        auto f = c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()));
        f->markCompleted(c10::IValue(out_));
        return f;
    }

  private:
    coll_comm *comm_;
    coll_req *req_;
    std::vector<at::Tensor> out_;
};

class CollBackend : public c10d::Backend {
  public:
    CollBackend(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size)
        : Backend(rank, size), blocking_(getenv("COLL_EXT_BLOCKING") != nullptr) {
        static const coll_store_ops ops = {store_set, store_get};
        check(nullptr, coll_init_store(&comm_, &ops, store.get(), rank, size, nullptr));
    }
    ~CollBackend() override { coll_destroy(comm_); }
    const std::string getBackendName() const override { return "collective_cpp"; }

    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &ts,
                                             const c10d::AllreduceOptions &opts) override {
        at::Tensor &t = ts.at(0);
        TORCH_CHECK(ts.size() == 1 && t.is_contiguous() && t.is_cpu(), "coll_ext: one contiguous CPU tensor");
        void *p = t.data_ptr();
        if (blocking_) {
            check(comm_, coll_allreduce(comm_, p, p, t.numel(), dtype_of(t), op_of(opts.reduceOp)));
            return done(ts);
        }
        coll_req *req = nullptr;
        check(comm_, coll_iallreduce(comm_, p, p, t.numel(), dtype_of(t), op_of(opts.reduceOp), &req));
        return c10::make_intrusive<CollWork>(comm_, req, ts);
    }

    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &out, at::Tensor &in,
                                                   const c10d::AllgatherOptions &) override {
        TORCH_CHECK(out.is_contiguous() && in.is_contiguous(), "coll_ext: contiguous tensors");
        TORCH_CHECK(out.numel() == in.numel() * size_, "coll_ext: output is not size x input");
        if (blocking_) {
            check(comm_, coll_allgather(comm_, in.data_ptr(), out.data_ptr(), in.numel(), dtype_of(in)));
            return done({out});
        }
        coll_req *req = nullptr;
        check(comm_, coll_iallgather(comm_, in.data_ptr(), out.data_ptr(), in.numel(), dtype_of(in), &req));
        return c10::make_intrusive<CollWork>(comm_, req, std::vector<at::Tensor>{out});
    }

    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override {
        check(comm_, coll_barrier(comm_));
        return done({});
    }

  private:
    static c10::intrusive_ptr<c10d::Work> done(std::vector<at::Tensor> out) {
        return c10::make_intrusive<CollWork>(nullptr, nullptr, std::move(out));
    }
    coll_comm *comm_ = nullptr;
    bool blocking_;
};

c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                         int size, const std::chrono::duration<float> &) {
    return c10::make_intrusive<CollBackend>(store, rank, size);
}

}  // namespace

PYBIND11_MODULE(coll_ext, m) {
    m.def("create", &create, "a collective_cpp backend (torch's creator signature)");
}
