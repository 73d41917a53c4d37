// Paged plans: the host schedule of the paged kernels (which CTA takes which query tile and KV
// chunk of which sequence, whether to split the KV and into what chunks, the merge rows), made
// once from the host lengths and uploaded without waiting; runs fill in the tensors and launch.
#include <algorithm>
#include <cstring>
#include <new>
#include <numeric>
#include <vector>

#include "core/kv_cache.h"
#include "core/lse.h"
#include "core/status.h"
#include "paged/paged.h"
#include "paged/tail.h"
#include "paged/tensor_map.h"

namespace fas_paged {

using fas::concat;
using fas::fail;
using fas::fail_cuda;

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Most chunks per tile that the decode kernel folds itself (create_plan): one round of the fold's
// loads (fold.cuh: kFoldStates). More take the merge kernel, whose many CTAs beat one CTA's serial
// rounds; up to 8 the fold in the kernel's tail beats the merge kernel's launch and run
// (docs/design/device-lengths.md).
constexpr int kFoldMaxChunks = kFoldStates;

// The work of one layout in host memory, in the order the device arrays take it.
struct HostSchedule {
    std::vector<int32_t> request, qo_tile, kv_tile;  // per CTA
    std::vector<int32_t> q_indptr, o_indptr, page_indptr, last_page_len, merge_indptr, page_ids;
    int32_t chunk = 0;
    int max_chunks = 1;
    int64_t partial_rows = 0;  // rows of the partial buffers (split plans)
    int64_t cta_keys = 0;      // keys over all CTAs of one KV head (for the mean per CTA)
};

// Splits each sequence's KV into chunks of `chunk` keys (a multiple of the kernel's KV tile) when
// the query tiles alone leave SMs idle: the smallest chunk whose CTA count still fits one wave.
int32_t choose_chunk(const std::vector<int64_t>& qo_tiles, const std::vector<int32_t>& kv_lengths, int num_heads_k,
                     int64_t wave, int kv_tile) {
    const int64_t base = num_heads_k * std::accumulate(qo_tiles.begin(), qo_tiles.end(), int64_t{0});
    const int32_t longest = *std::max_element(kv_lengths.begin(), kv_lengths.end());
    if (base >= wave || longest <= kv_tile) return 0;
    const auto ctas = [&](int64_t chunk) {
        int64_t total = 0;
        for (size_t i = 0; i < qo_tiles.size(); ++i) total += qo_tiles[i] * ceil_div(std::max(kv_lengths[i], 1), chunk);
        return total * num_heads_k;
    };
    int64_t low = 1, high = ceil_div(longest, kv_tile);  // in KV tiles; `high` always fits (one chunk each)
    while (low < high) {
        const int64_t mid = (low + high) / 2;
        if (ctas(mid * kv_tile) <= wave) high = mid; else low = mid + 1;
    }
    return high * kv_tile >= longest ? 0 : static_cast<int32_t>(high * kv_tile);
}

void build_schedule(const fas::Layout& layout, const PlanRequest& request, int tile_q, int kv_tile, int64_t wave,
                    HostSchedule* s) {
    const int batch = request.batch_size;
    const int group = layout.num_heads_q / layout.num_heads_k;
    std::vector<int32_t> kv_len(batch), span(batch);  // span: the keys a window leaves (all without one)
    std::vector<int64_t> qo_tiles(batch);
    for (int i = 0; i < batch; ++i) {
        kv_len[i] = kv_length(request, i);
        const int32_t qo_len = request.cu_seqlens_q[i + 1] - request.cu_seqlens_q[i];
        qo_tiles[i] = ceil_div(int64_t{qo_len} * group, tile_q);
        span[i] = kv_len[i] - window_start(kv_len[i], qo_len, layout.window_left);
    }
    s->q_indptr.assign(request.cu_seqlens_q, request.cu_seqlens_q + batch + 1);
    s->page_indptr.assign(batch + 1, 0);
    s->last_page_len.assign(batch, 0);
    const int page = request.page_size;
    for (int i = 0; i < batch; ++i) {
        const int32_t pages = static_cast<int32_t>(ceil_div(kv_len[i], page));
        s->page_indptr[i + 1] = s->page_indptr[i] + pages;
        s->last_page_len[i] = pages == 0 ? 0 : kv_len[i] - (pages - 1) * page;
        if (request.cu_seqlens_k != nullptr) {  // contiguous KV: the plan lists its own pages
            for (int32_t p = 0; p < pages; ++p) s->page_ids.push_back(request.cu_seqlens_k[i] + p * page);
        }
    }

    s->chunk = choose_chunk(qo_tiles, span, layout.num_heads_k, wave, kv_tile);
    const bool split = s->chunk > 0;
    std::vector<int32_t> chunks(batch, 1);
    if (split) {
        for (int i = 0; i < batch; ++i) chunks[i] = static_cast<int32_t>(ceil_div(std::max(span[i], 1), s->chunk));
        s->max_chunks = *std::max_element(chunks.begin(), chunks.end());
    }
    // The longest KVs first: their CTAs take longest, so they should start first.
    std::vector<int> order(batch);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return span[a] > span[b]; });
    for (int i : order) {
        for (int64_t t = 0; t < qo_tiles[i]; ++t) {
            for (int32_t c = 0; c < chunks[i]; ++c) {
                s->request.push_back(i);
                s->qo_tile.push_back(static_cast<int32_t>(t));
                s->kv_tile.push_back(c);
                s->cta_keys += split ? std::min<int64_t>(s->chunk, span[i] - int64_t{c} * s->chunk) : span[i];
            }
        }
    }
    s->o_indptr.assign(batch + 1, 0);
    if (!split) {
        s->o_indptr = s->q_indptr;  // the kernel writes out's own rows
        return;
    }
    // Partial rows: sequence i's query j, chunk c at o_indptr[i] + j * chunks[i] + c; the merge
    // folds each row's chunks into out.
    s->merge_indptr.assign(1, 0);
    for (int i = 0; i < batch; ++i) {
        const int32_t qo_len = request.cu_seqlens_q[i + 1] - request.cu_seqlens_q[i];
        s->o_indptr[i + 1] = s->o_indptr[i] + qo_len * chunks[i];
        for (int32_t j = 0; j < qo_len; ++j) s->merge_indptr.push_back(s->merge_indptr.back() + chunks[i]);
    }
    s->partial_rows = s->o_indptr[batch];
}

// A device-length plan's arrays (paged.h): the capacity schedule `s` widened to what any update
// may write (fas_plan_update rewrites them), the page table as block-table rows, the capacity and
// the CTA count the kernels read.
void widen_for_updates(const fas::Layout& layout, const PlanRequest& request, int tile_q, int64_t wave,
                          HostSchedule* s, std::vector<int32_t>* capacity) {
    const int batch = request.batch_size, group = layout.num_heads_q / layout.num_heads_k;
    int64_t tiles = 0;
    for (int i = 0; i < batch; ++i) {
        tiles += ceil_div(int64_t{request.cu_seqlens_q[i + 1] - request.cu_seqlens_q[i]} * group, tile_q);
    }
    // Unsplit, one item per query tile; split, at most a wave's CTAs (choose_chunk).
    const int64_t items = std::max(tiles, wave / layout.num_heads_k);
    for (auto* column : {&s->request, &s->qo_tile, &s->kv_tile}) column->resize(items, 0);
    capacity->assign(request.kv_lengths, request.kv_lengths + batch);
    for (int i = 0; i <= batch; ++i) s->page_indptr[i] = i * request.table_stride;
    for (int i = 0; i < batch; ++i) s->last_page_len[i] = request.kv_lengths[i] - (request.table_stride - 1) * request.page_size;
    if (s->chunk == 0) {  // the update's unsplit form: one chunk per sequence, which the merge skips
        s->merge_indptr.resize(layout.total_q - request.cu_seqlens_q[0] + 1);
        std::iota(s->merge_indptr.begin(), s->merge_indptr.end(), 0);
        s->chunk = kUnsplitChunk;
    }
    s->partial_rows = std::max(s->partial_rows, ceil_div(tile_q, group) * items);
}

// Appends `values` to the staging image at *offset (4-byte entries, 16-byte aligned starts).
const int32_t* place(const std::vector<int32_t>& values, char* staging, const char* device, size_t* offset) {
    const size_t at = *offset;
    if (!values.empty()) std::memcpy(staging + at, values.data(), values.size() * sizeof(int32_t));
    *offset = (at + values.size() * sizeof(int32_t) + 15) / 16 * 16;
    return reinterpret_cast<const int32_t*>(device + at);
}

}  // namespace

fas_status create_plan(const fas::Layout& layout, const Kernel* kernel, const PlanRequest& request,
                       const fas::DeviceProps& device, std::unique_ptr<Plan>* out) {
    int short_ctas = 0, long_ctas = 0, stream_ctas = 0, wide_ctas = 0, pair_ctas = 0, fine_ctas = 0;  // per SM; 0: none
    cudaError_t error = kernel->occupancy(kShort, &short_ctas);
    if (error == cudaSuccess) error = kernel->occupancy(kLong, &long_ctas);
    if (error == cudaSuccess) error = kernel->occupancy(kStream, &stream_ctas);
    if (error == cudaSuccess) error = kernel->occupancy(kWideStream, &wide_ctas);
    if (error == cudaSuccess) error = kernel->occupancy(kPairStream, &pair_ctas);
    if (error == cudaSuccess) error = kernel->occupancy(kFineStream, &fine_ctas);
    if (error != cudaSuccess) return fail_cuda(error, "querying the paged kernel's occupancy");
    const auto wave = [&](int ctas_per_sm) { return static_cast<int64_t>(std::max(ctas_per_sm, 1)) * device.sm_count; };

    const bool fp8_kv = kernel->kv_dtype == FAS_DTYPE_E4M3;
    LaunchArgs stream_args{};
    std::string no_stream;
    const bool contiguous = request.cu_seqlens_k != nullptr;  // else a paged cache
    const int box_rows = stream_box_rows(contiguous, request.page_size);
    bool fast_card = device.dram_bytes_per_sm_clock() >= kStreamMinBytesPerSmClock;
#ifdef FAS_DEV_DECODE_SHAPE  // measuring builds only (bench/dev_library.py --define): 2 stream, else the others
    fast_card = FAS_DEV_DECODE_SHAPE == 2;
#endif
    // 32-row tiles in the pair shape where paged.h's planned_tile_rows says so.
    const int64_t packed_rows = int64_t{layout.max_seqlen_q} * (layout.num_heads_q / layout.num_heads_k);
    const bool pair = pair_ctas > 0 && planned_tile_rows(*kernel, packed_rows) == kPairTileRows;
    const bool stream = (fast_card || pair || streams_on_any_card(layout.head_dim, fp8_kv)) && stream_ctas > 0 &&
                        box_rows > 0 && stream_maps(layout, kernel, request, box_rows, &stream_args, &no_stream);
    // A stream shape where it can run and the card's memory outruns the other shapes, or the plan
    // streams on any card (paged.h; wide where the kernel has it, on such a card), a persistent
    // CTA per SM (its wave is one CTA per SM).
    // Otherwise the decode kernel's long shape when its CTAs would be long enough, else the short
    // one. For e4m3 caches the second shape is the dense one (paged.h): taken when its schedule
    // fills at most one wave, or when its waves (each CTA sharing its SM with two others) cost no
    // more than the short shape's: ceil(ctas / wave) x CTAs per SM, the time of a wave of equal CTAs.
    HostSchedule s;
    DecodeShape shape = kShort;
    try {
        if (stream) {
            shape = pair                                        ? kPairStream
                    : fast_card && wide_ctas > 0 &&
                              stream_boxes_fit(kv_tile_rows(layout.head_dim, 16, kWideStream, fp8_kv), box_rows)
                        ? kWideStream
                    : fast_card && contiguous && fine_ctas > 0 ? kFineStream
                                                                : kStream;
            build_schedule(layout, request, shape == kPairStream ? kPairTileRows : kernel->tile_q,
                           kv_tile_rows(layout.head_dim, kernel->tile_q, shape, fp8_kv), wave(1), &s);
        } else if (long_ctas > 0) {
            build_schedule(layout, request, kernel->tile_q, kv_tile_rows(layout.head_dim, kernel->tile_q, kLong, fp8_kv),
                           wave(long_ctas), &s);
            const int64_t per_head = static_cast<int64_t>(s.request.size());  // cta_keys counts one KV head
            const int64_t ctas = per_head * layout.num_heads_k;                 // launched
            const auto waves_cost = [&](int per_sm) { return ceil_div(ctas, wave(per_sm)) * std::max(per_sm, 1); };
            const bool long_shape =
                ctas > 0 && (fp8_kv ? ctas <= wave(long_ctas) || waves_cost(long_ctas) <= waves_cost(short_ctas)
                                    : s.cta_keys > int64_t{kLongDecodeMinKeys} * per_head);
            if (long_shape) shape = kLong;
        }
        if (shape == kShort) {
            s = HostSchedule();
            build_schedule(layout, request, kernel->tile_q, kv_tile_rows(layout.head_dim, kernel->tile_q),
                           wave(short_ctas), &s);
        }
    } catch (const std::bad_alloc&) {
        return fail(FAS_ERROR_INTERNAL, "out of host memory while planning the paged kernels' work");
    }
    // The shape's query tile rows, CTAs per SM and wave, as build_schedule planned with them.
    const int tile_rows = shape == kPairStream ? kPairTileRows : kernel->tile_q;
    const int ctas_per_sm = is_stream(shape) ? 1 : shape == kLong ? long_ctas : std::max(short_ctas, 1);
    const bool device_lengths = request.table_stride > 0;
    std::vector<int32_t> capacity;
    const int32_t planned_ctas = static_cast<int32_t>(s.request.size());
    const int max_chunks = s.max_chunks;  // before the widening: the capacity's own split
    // Whether the plan takes the tail variant (tail.h): a device-length plan by its capacity's items.
    const int box_shift = stream_args.box_shift;
    const bool cuts = (shape == kStream || shape == kFineStream) && !fp8_kv &&
                      host_tail_cuts(request, layout.window_left, s.request, layout.num_heads_k, s.chunk, wave(1),
                                     box_shift, kv_tile_rows(layout.head_dim, 16, shape), 4LL * layout.head_dim << box_shift);
    if (device_lengths) widen_for_updates(layout, request, tile_rows, wave(ctas_per_sm), &s, &capacity);
    const int64_t num_ctas = static_cast<int64_t>(s.request.size());
    // Split decode plans fold in the kernel (fold.cuh) where a tile holds at most kFoldMaxChunks
    // chunks, so that no merge kernel follows: a host plan by its own chunks, a device-length plan
    // (whose update splits at run time) by its capacity's (fewer sequences than that still fold,
    // more slowly than the merge kernel would). The fold is the merge's arithmetic: same bits.
    const int group = layout.num_heads_q / layout.num_heads_k;
    const bool fold = kernel->tile_q == 16 && s.chunk > 0 && max_chunks <= kFoldMaxChunks;  // device plans: chunk > 0
    const std::vector<int32_t> fold_counts(
        fold ? static_cast<size_t>(s.partial_rows) * layout.num_heads_k * ceil_div(group, 16) : 0, 0);
    // The tail's rows (decode_items.cuh): fewer items than the grid (a device-length plan's updates:
    // any count up to it), each piece's units (boxes) summed in 32 bits.
    const int64_t items = num_ctas * layout.num_heads_k, grid = std::min<int64_t>(items, wave(1));
    const int64_t leftover = device_lengths ? grid - 1 : s.chunk == 0 && items > grid ? items % grid : 0;
    int64_t longest = 0;
    for (int i = 0; i < request.batch_size; ++i) longest = std::max<int64_t>(longest, kv_length(request, i));
    const bool tail = cuts && leftover > 0 && leftover <= kTailMaxItems &&
                      ((longest >> box_shift) + 1) * leftover < (int64_t{1} << 30);
    const int64_t tail_rows = tail ? leftover * kTailMaxPieces * 32 : 0;  // [item][piece][16-row block][16]
    const std::vector<int32_t> tail_counts(static_cast<size_t>(tail ? leftover * 2 : 0), 0);
    // The kernel addresses out, the partial buffers and q with 32-bit products.
    const int64_t out_elements = std::max<int64_t>(layout.total_q, s.partial_rows) * layout.num_heads_q * layout.head_dim;
    const int64_t q_elements = static_cast<int64_t>(layout.total_q) * layout.q_row_stride;
    if (num_ctas * layout.num_heads_k > INT32_MAX || out_elements >= (int64_t{1} << 32) ||
        q_elements >= (int64_t{1} << 32)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("the layout is too large for the paged kernels' 32-bit indexing (", num_ctas, " CTAs, ",
                           out_elements, " output elements, ", q_elements,
                           " elements of q); split the batch into smaller plans"));
    }

    std::unique_ptr<Plan> plan(new (std::nothrow) Plan());
    if (plan == nullptr) return fail(FAS_ERROR_INTERNAL, "out of host memory for the paged plan");
    const std::vector<int32_t> chunk_value{s.chunk}, ctas_value{planned_ctas};
    const std::vector<int32_t>* arrays[] = {&s.request,  &s.qo_tile,     &s.kv_tile,   &s.q_indptr,
                                            &s.o_indptr, &s.page_indptr, &s.last_page_len, &s.merge_indptr,
                                            &s.page_ids, &chunk_value,   &capacity,    &ctas_value,
                                            &fold_counts, &tail_counts};
    size_t schedule_bytes = 0;
    for (const auto* values : arrays) schedule_bytes += (values->size() * sizeof(int32_t) + 15) / 16 * 16;
    const size_t element = static_cast<size_t>(kPartialElementBytes);
    const size_t partial_v = static_cast<size_t>(s.partial_rows) * layout.num_heads_q * layout.head_dim * element;
    const size_t partial_s = static_cast<size_t>(s.partial_rows) * layout.num_heads_q * sizeof(float);
    const size_t partial_at = (schedule_bytes + 255) / 256 * 256;
    const size_t tail_at = partial_at + (partial_v + partial_s + 255) / 256 * 256;
    const size_t tail_v = static_cast<size_t>(tail_rows) * layout.head_dim * sizeof(float);
    const size_t total_bytes = tail_at + tail_v + static_cast<size_t>(tail_rows) * sizeof(float);
    std::string message;
    error = fas::device_block_acquire(total_bytes, schedule_bytes, "paged schedule", &plan->block, &message);
    if (error != cudaSuccess) return fail_cuda(error, message);

    char* staging = static_cast<char*>(plan->block->staging);
    const char* base = static_cast<const char*>(plan->block->device_memory);
    size_t offset = 0;
    LaunchArgs& a = plan->args;
    a.request_indices = place(s.request, staging, base, &offset);
    a.qo_tile_indices = place(s.qo_tile, staging, base, &offset);
    a.kv_tile_indices = place(s.kv_tile, staging, base, &offset);
    a.q_indptr = place(s.q_indptr, staging, base, &offset);
    a.o_indptr = place(s.o_indptr, staging, base, &offset);
    a.page_indptr = place(s.page_indptr, staging, base, &offset);
    a.last_page_len = place(s.last_page_len, staging, base, &offset);
    a.merge_indptr = place(s.merge_indptr, staging, base, &offset);
    const int32_t* own_page_ids = place(s.page_ids, staging, base, &offset);
    a.kv_chunk_size = place(chunk_value, staging, base, &offset);
    const int32_t* capacity_on_device = place(capacity, staging, base, &offset);
    const int32_t* ctas_on_device = place(ctas_value, staging, base, &offset);
    const int32_t* fold_on_device = place(fold_counts, staging, base, &offset);
    const int32_t* tail_counts_on_device = place(tail_counts, staging, base, &offset);
    error = fas::device_block_upload(plan->block, schedule_bytes, &message);
    if (error == cudaSuccess && device_lengths) {
        // Made once, updated and run in captured graphs: nothing may query the upload's event
        // there (an event query is refused during capture), so wait for it here.
        error = cudaEventSynchronize(plan->block->uploaded);
        if (error == cudaSuccess) plan->block->upload_seen_complete.store(true, std::memory_order_release);
        message = "waiting for the device-length plan's upload";
    }
    if (error != cudaSuccess) {
        cudaGetLastError();
        return fail_cuda(error, message);
    }

    a.q_row_stride = layout.q_row_stride;
    a.k_page_stride = static_cast<uint32_t>(request.k_page_stride);
    a.v_page_stride = static_cast<uint32_t>(request.v_page_stride);
    a.k_row_stride = static_cast<uint32_t>(layout.k_row_stride);
    a.v_row_stride = static_cast<uint32_t>(layout.v_row_stride);
    a.num_heads_q = layout.num_heads_q;
    a.num_heads_k = layout.num_heads_k;
    a.page_size = request.page_size;
    a.batch_size = request.batch_size;
    a.softmax_scale = layout.softmax_scale;
    a.num_ctas = static_cast<int>(num_ctas);
    a.split = s.chunk > 0;
    a.tmp_v = a.split ? static_cast<void*>(static_cast<char*>(plan->block->device_memory) + partial_at) : nullptr;
    a.tmp_s = a.split ? reinterpret_cast<float*>(static_cast<char*>(plan->block->device_memory) + partial_at + partial_v)
                      : nullptr;
    a.fold_counts = fold ? const_cast<int32_t*>(fold_on_device) : nullptr;  // the plan's block
    if (tail) {
        char* const tail_memory = static_cast<char*>(plan->block->device_memory) + tail_at;
        a.tail_v = reinterpret_cast<float*>(tail_memory);
        a.tail_s = reinterpret_cast<float*>(tail_memory + tail_v);
        a.tail_counts = const_cast<int32_t*>(tail_counts_on_device);
    }
    a.first_row = request.cu_seqlens_q[0];
    a.merge_rows = layout.total_q - a.first_row;
    a.sm_count = device.sm_count;
    a.shape = shape;
    if (is_stream(shape)) {
        a.k_map = stream_args.k_map;
        a.v_map = stream_args.v_map;
        a.tma_flat = stream_args.tma_flat;
        a.box_shift = stream_args.box_shift;
    }
    a.window_left = layout.window_left;
    a.softcap = layout.softcap;
    a.q_fp8 = layout.dtype == FAS_DTYPE_E4M3;  // an FP8 plan: e4m3 q over the e4m3 caches
    if (contiguous) a.page_indices = own_page_ids;

    plan->kernel = kernel;
    plan->contiguous_kv = contiguous;
    plan->total_q = layout.total_q;
    plan->total_pages = s.page_indptr.back();
    plan->kv_splits = a.split ? s.max_chunks : tail ? kTailMaxPieces : 1;  // the tail's pieces: at most
    plan->ctas_per_sm = ctas_per_sm;
    plan->tile_rows = tile_rows;
    plan->group = layout.num_heads_q / layout.num_heads_k;
    if (device_lengths) {
        a.device_ctas = ctas_on_device;
        const auto own = [](const int32_t* p) { return const_cast<int32_t*>(p); };  // the plan's block
        plan->update = DeviceUpdate{request.batch_size, plan->group, tile_rows,
                                    kv_tile_rows(layout.head_dim, kernel->tile_q, shape, fp8_kv), layout.num_heads_k,
                                    layout.window_left, request.page_size, request.table_stride, a.num_ctas,
                                    wave(ctas_per_sm), capacity_on_device,
                                    a.q_indptr, own(a.last_page_len), own(a.o_indptr), own(a.merge_indptr),
                                    own(a.kv_chunk_size), own(a.request_indices), own(a.qo_tile_indices),
                                    own(a.kv_tile_indices), own(ctas_on_device)};
    }
    *out = std::move(plan);
    return FAS_SUCCESS;
}

fas_status run_plan(const Plan& plan, const fas_plan_run_args& run) {
    LaunchArgs a = plan.args;
    if (!plan.contiguous_kv) {
        if (const fas_status status = fas::check_page_indices(run.page_indices, plan.total_pages);
            status != FAS_SUCCESS) {
            return status;
        }
        a.page_indices = run.page_indices;
    }
    a.q = run.q;
    a.k_cache = run.k;
    a.v_cache = run.v;
    a.out = run.out;
    a.lse = run.softmax_lse;
    a.sinks = run.sinks;
    if (plan.kernel->kv_dtype == FAS_DTYPE_E4M3) {
        if (run.k_descale == nullptr || run.v_descale == nullptr) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        "the plan reads an FP8 (e4m3) KV cache: pass k_descale and v_descale (DEVICE fp32 arrays "
                        "of num_heads_k, the scales the caches were quantized with) in fas_plan_run_args");
        }
        for (const auto& [descale, name] : {std::pair<const float*, const char*>{run.k_descale, "k_descale"},
                                            {run.v_descale, "v_descale"}, {run.q_descale, "q_descale"}}) {
            if (!fas::is_aligned(descale, sizeof(float))) {
                return fail(FAS_ERROR_INVALID_ARGUMENT, fas::concat(name, " must be 4-byte aligned"));
            }
        }
        a.k_descale = run.k_descale;
        a.v_descale = run.v_descale;
        a.q_descale = a.q_fp8 ? run.q_descale : nullptr;
    }
    if (is_stream(a.shape)) {  // the plan's tensor maps, with this run's caches
        std::string why;
        if (!replace_address(&a.k_map, run.k, &why) || !replace_address(&a.v_map, run.v, &why)) {
            return fail(FAS_ERROR_CUDA, why);
        }
    }
    cudaError_t error = fas::device_block_prepare_run(plan.block, run.stream);
    if (error != cudaSuccess) return fail_cuda(error, "waiting for the paged schedule upload (cudaStreamWaitEvent)");
    error = plan.kernel->launch(a, run.stream);
    if (error != cudaSuccess) return fail_cuda(error, "paged kernel launch");
    if (run.softmax_lse == nullptr) return FAS_SUCCESS;
    const int64_t first = static_cast<int64_t>(a.first_row) * a.num_heads_q;
    error = fas::convert_lse_log2_to_ln(run.softmax_lse + first, static_cast<int64_t>(plan.total_q) * a.num_heads_q - first,
                                        a.sm_count, run.stream);
    if (error != cudaSuccess) return fail_cuda(error, "LSE conversion kernel launch");
    return FAS_SUCCESS;
}

fas_status update_plan(const Plan& plan, const int32_t* kv_lengths, cudaStream_t stream) {
    cudaError_t error = fas::device_block_prepare_run(plan.block, stream);
    if (error != cudaSuccess) return fail_cuda(error, "waiting for the paged schedule upload (cudaStreamWaitEvent)");
    error = launch_update(plan.update, kv_lengths, stream);
    if (error != cudaSuccess) return fail_cuda(error, "paged plan update kernel launch");
    return FAS_SUCCESS;
}

fas_status retire_plan(Plan* plan, cudaStream_t stream) {
    const cudaError_t error = fas::device_block_retire(plan->block, stream);
    if (error != cudaSuccess) return fail_cuda(error, "ordering the paged schedule's release after the stream's work");
    plan->block = nullptr;
    return FAS_SUCCESS;
}

}  // namespace fas_paged
