// Gloo all-reduce (float, sum) over its tcp transport with a FileStore rendezvous,
// printed in coll_perf's columns (size, count, type, redop, root, time us, algbw,
// busbw 2(n-1)/n, #wrong) for perf/compare. Results checked against the exact sum.
//   gloo_bench RANK SIZE STOREDIR ALGO(ring|ring_chunked|halving_doubling) MIN MAX ITERS WARMUP
// Each rank is its own process; perf/compare starts them.
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

static float value(int rank, size_t i)
{
    return (float)((rank + 1) * (int)(i % 7 + 1));
}

static std::unique_ptr<gloo::Algorithm> make(const std::string &algo,
                                             const std::shared_ptr<gloo::Context> &ctx,
                                             float *buf, int count)
{
    std::vector<float *> ptrs{ buf };
    if (algo == "ring")
        return std::make_unique<gloo::AllreduceRing<float>>(ctx, ptrs, count);
    if (algo == "halving_doubling")
        return std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx, ptrs, count);
    return std::make_unique<gloo::AllreduceRingChunked<float>>(ctx, ptrs, count);
}

int main(int argc, char **argv)
{
    if (argc != 9) {
        std::fprintf(stderr, "usage: gloo_bench RANK SIZE STOREDIR ALGO MIN MAX ITERS WARMUP\n");
        return 2;
    }
    int rank = std::atoi(argv[1]), n = std::atoi(argv[2]);
    std::string algo = argv[4];
    size_t lo = std::strtoull(argv[5], nullptr, 0), hi = std::strtoull(argv[6], nullptr, 0);
    int iters = std::atoi(argv[7]), warmup = std::atoi(argv[8]);
    gloo::transport::tcp::attr attr("127.0.0.1");
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(argv[3]);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
    ctx->connectFullMesh(store, dev);
    gloo::BarrierAllToOne barrier(ctx);
    for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
        size_t count = bytes / sizeof(float);
        std::vector<float> buf(count);
        auto fill = [&] {
            for (size_t i = 0; i < count; i++)
                buf[i] = value(rank, i);
        };
        auto op = make(algo, ctx, buf.data(), (int)count);
        for (int k = 0; k < warmup; k++)
            fill(), op->run();
        barrier.run();
        double total = 0;
        long wrong = 0;
        for (int k = 0; k < iters; k++) {
            fill(); // in place: refill outside the timed call
            auto t0 = std::chrono::steady_clock::now();
            op->run();
            total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        for (size_t i = 0; i < count; i++) {
            float want = 0;
            for (int r = 0; r < n; r++)
                want += value(r, i);
            wrong += buf[i] != want;
        }
        double t = total / iters, algbw = bytes / t / 1e9;
        if (rank == 0)
            std::printf("%12zu  %12zu     float     sum      -1  %9.2f  %6.2f  %6.2f  %6ld\n", bytes,
                        count, t * 1e6, algbw, algbw * 2.0 * (n - 1) / n, wrong);
        std::fflush(stdout);
        barrier.run();
    }
    return 0;
}
