#include "loom/kernels/cpu/index.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "loom/core/parallel.h"
#include "loom/core/scalar_cast.h"

namespace loom::kernels::cpu {

namespace {

void check_index_dtype(const Tensor& index, const char* op) {
  LOOM_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, DTypeError, op,
             ": index must be int32 or int64, got ", dtype_name(index.dtype()));
}

// Index values as int64, validated against [0, limit).
std::vector<int64_t> checked_indices(const Tensor& index, int64_t limit, const char* op) {
  check_index_dtype(index, op);
  Tensor c = index.contiguous();
  std::vector<int64_t> v(static_cast<size_t>(c.numel()));
  if (c.dtype() == DType::i64) {
    const int64_t* p = c.data<int64_t>();
    std::copy(p, p + c.numel(), v.begin());
  } else {
    const int32_t* p = c.data<int32_t>();
    std::copy(p, p + c.numel(), v.begin());
  }
  for (size_t i = 0; i < v.size(); ++i)
    LOOM_CHECK(v[i] >= 0 && v[i] < limit, ValueError, op, ": index ", v[i], " at position ", i,
               " is out of range [0, ", limit, ")");
  return v;
}

}  // namespace

int64_t index_at(const Tensor& c, int64_t i) {
  return c.dtype() == DType::i64 ? c.data<int64_t>()[i] : static_cast<int64_t>(c.data<int32_t>()[i]);
}

namespace {
// The ids as rows of this weight: id − first row, or −1 for an id another rank's rows hold.
std::vector<int64_t> embedding_rows(const Tensor& ids, int64_t rows, const VocabShard* shard, const char* op) {
  std::vector<int64_t> idx = checked_indices(ids, shard ? shard->size : rows, op);
  if (shard)
    for (int64_t& i : idx) i = i >= shard->begin && i < shard->begin + rows ? i - shard->begin : -1;
  return idx;
}
}  // namespace

Tensor embedding(const Tensor& ids, const Tensor& weight, const VocabShard* shard) {
  LOOM_CHECK(weight.dim() == 2, ShapeError, "embedding: weight must be [vocab, dim], got ",
             weight.shape().str());
  const int64_t V = weight.shape()[0], D = weight.shape()[1];
  std::vector<int64_t> idx = embedding_rows(ids, V, shard, "embedding");
  Shape out_shape = ids.shape();
  out_shape.push_back(D);
  Tensor w = weight.contiguous();
  Tensor out = Tensor::empty(out_shape, weight.dtype());
  const size_t row_bytes = static_cast<size_t>(D) * weight.element_size();
  const char* src = static_cast<const char*>(w.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  parallel_for(0, static_cast<int64_t>(idx.size()), 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      if (idx[t] < 0) std::memset(dst + t * row_bytes, 0, row_bytes);  // +0: the holder adds the row
      else std::memcpy(dst + t * row_bytes, src + idx[t] * row_bytes, row_bytes);
    }
  });
  return out;
}

Tensor embedding_backward(const Tensor& grad, const Tensor& ids, int64_t num_rows, DType grad_dtype,
                          const VocabShard* shard) {
  const int64_t D = grad.shape()[grad.dim() - 1];
  std::vector<int64_t> idx = embedding_rows(ids, num_rows, shard, "embedding_backward");
  LOOM_CHECK(static_cast<int64_t>(idx.size()) * D == grad.numel(), ShapeError,
             "embedding_backward: grad ", grad.shape().str(), " does not match ", idx.size(), " ids");
  Tensor out = Tensor::zeros({num_rows, D}, grad_dtype);
  Tensor g = grad.contiguous();
  LOOM_DISPATCH_FLOATING(grad_dtype, "embedding_backward", [&] {
    using O = scalar_t;
    O* po = out.data<O>();
    LOOM_DISPATCH_FLOATING(g.dtype(), "embedding_backward", [&] {
      using G = scalar_t;
      using C = std::conditional_t<std::is_same_v<O, double>, double, float>;
      const G* pg = g.data<G>();
      parallel_for(0, D, 64, [&](int64_t c0, int64_t c1) {
        for (size_t t = 0; t < idx.size(); ++t) {
          if (idx[t] < 0) continue;  // another rank's row
          O* row = po + idx[t] * D;
          const G* gr = pg + static_cast<int64_t>(t) * D;
          for (int64_t c = c0; c < c1; ++c) row[c] = cast_scalar<O>(cast_scalar<C>(row[c]) + cast_scalar<C>(gr[c]));
        }
      });
    });
  });
  return out;
}

namespace {

// Shared loop for gather/scatter: visits every element position p of `index` (shape I), giving
// the flat offset of p in a tensor of shape/strides (s), with coordinate `dim` replaced by idx.
template <typename Fn>
void for_index_positions(const Shape& ishape, Fn&& fn) {
  const int nd = ishape.ndim();
  std::vector<int64_t> coord(nd, 0);
  const int64_t n = ishape.numel();
  for (int64_t flat = 0; flat < n; ++flat) {
    fn(flat, coord);
    for (int d = nd - 1; d >= 0; --d) {
      if (++coord[d] < ishape[d]) break;
      coord[d] = 0;
    }
  }
}

int64_t offset_of(const std::vector<int64_t>& coord, const Shape& strides, int dim, int64_t idx) {
  int64_t off = 0;
  for (size_t d = 0; d < coord.size(); ++d) off += (static_cast<int>(d) == dim ? idx : coord[d]) * strides[static_cast<int>(d)];
  return off;
}

void check_gather_shapes(const Tensor& x, int dim, const Tensor& index, const char* op) {
  LOOM_CHECK(index.dim() == x.dim(), ShapeError, op, ": index ", index.shape().str(),
             " must have as many dims as the input ", x.shape().str());
  for (int d = 0; d < x.dim(); ++d)
    LOOM_CHECK(d == dim || index.shape()[d] <= x.shape()[d], ShapeError, op, ": index ",
               index.shape().str(), " is larger than the input ", x.shape().str(), " in dim ", d);
}

}  // namespace

Tensor gather(const Tensor& x, int dim_in, const Tensor& index) {
  const int dim = normalize_dim(dim_in, x.dim(), "gather");
  check_gather_shapes(x, dim, index, "gather");
  std::vector<int64_t> idx = checked_indices(index, x.shape()[dim], "gather");
  Tensor out = Tensor::empty(index.shape(), x.dtype());
  LOOM_DISPATCH_ALL(x.dtype(), "gather", [&] {
    const scalar_t* px = static_cast<const scalar_t*>(x.raw_data());
    scalar_t* po = out.data<scalar_t>();
    for_index_positions(index.shape(), [&](int64_t flat, const std::vector<int64_t>& coord) {
      po[flat] = px[offset_of(coord, x.strides(), dim, idx[flat])];
    });
  });
  return out;
}

Tensor scatter(const Tensor& x, int dim_in, const Tensor& index, const Tensor& src, bool accumulate) {
  const int dim = normalize_dim(dim_in, x.dim(), "scatter");
  check_gather_shapes(x, dim, index, "scatter");
  LOOM_CHECK(src.shape() == index.shape(), ShapeError, "scatter: src ", src.shape().str(),
             " must have the index's shape ", index.shape().str());
  check_same_dtype(x, src, "scatter");
  std::vector<int64_t> idx = checked_indices(index, x.shape()[dim], "scatter");
  Tensor out = x.clone();
  Tensor s = src.contiguous();
  LOOM_DISPATCH_FLOATING(x.dtype(), "scatter", [&] {
    using C = compute_t<scalar_t>;
    scalar_t* po = out.data<scalar_t>();
    const scalar_t* ps = s.data<scalar_t>();
    for_index_positions(index.shape(), [&](int64_t flat, const std::vector<int64_t>& coord) {
      scalar_t& dst = po[offset_of(coord, out.strides(), dim, idx[flat])];
      dst = accumulate ? cast_scalar<scalar_t>(C(dst) + C(ps[flat])) : ps[flat];
    });
  });
  return out;
}

Tensor index_select(const Tensor& x, int dim_in, const Tensor& index) {
  const int dim = normalize_dim(dim_in, x.dim(), "index_select");
  LOOM_CHECK(index.dim() == 1, ShapeError, "index_select: index must be 1-D, got ", index.shape().str());
  std::vector<int64_t> idx = checked_indices(index, x.shape()[dim], "index_select");
  Shape out_shape = x.shape();
  out_shape[dim] = static_cast<int64_t>(idx.size());
  Tensor out = Tensor::empty(out_shape, x.dtype());
  parallel_for(0, static_cast<int64_t>(idx.size()), 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out.select(dim, i).copy_(x.select(dim, idx[i]));
  });
  return out;
}

Tensor index_add(const Tensor& x, int dim_in, const Tensor& index, const Tensor& src) {
  const int dim = normalize_dim(dim_in, x.dim(), "index_add");
  LOOM_CHECK(index.dim() == 1, ShapeError, "index_add: index must be 1-D, got ", index.shape().str());
  std::vector<int64_t> idx = checked_indices(index, x.shape()[dim], "index_add");
  Shape want = x.shape();
  want[dim] = static_cast<int64_t>(idx.size());
  LOOM_CHECK(src.shape() == want, ShapeError, "index_add: src ", src.shape().str(), " must be ",
             want.str(), " (input shape with dim ", dim, " = number of indices)");
  check_same_dtype(x, src, "index_add");
  Tensor out = x.clone();
  // Rows are added in index order on one thread per destination slice: deterministic.
  for (size_t i = 0; i < idx.size(); ++i) {
    Tensor dst = out.select(dim, idx[i]);
    Tensor add = src.select(dim, static_cast<int64_t>(i));
    LOOM_DISPATCH_FLOATING(x.dtype(), "index_add", [&] {
      using C = compute_t<scalar_t>;
      Tensor a = add.contiguous();
      Tensor d = dst.is_contiguous() ? dst : dst.contiguous();
      scalar_t* pd = d.data<scalar_t>();
      const scalar_t* pa = a.data<scalar_t>();
      for (int64_t j = 0; j < d.numel(); ++j) pd[j] = cast_scalar<scalar_t>(C(pd[j]) + C(pa[j]));
      if (!dst.is_contiguous()) dst.copy_(d);
    });
  }
  return out;
}

void topk(const Tensor& x, int64_t k, Tensor& values, Tensor& indices) {
  check_floating(x, "topk", "input");
  LOOM_CHECK(x.dim() >= 1, ShapeError, "topk: input must have at least one dim");
  const int64_t n = x.shape()[x.dim() - 1];
  LOOM_CHECK(k >= 1 && k <= n, ValueError, "topk: k=", k, " must be in [1, ", n, "] (the last dim of ",
             x.shape().str(), ")");
  Tensor xc = x.contiguous();
  const int64_t rows = x.numel() / n;
  Shape out_shape = x.shape();
  out_shape[out_shape.ndim() - 1] = k;
  values = Tensor::empty(out_shape, x.dtype());
  indices = Tensor::empty(out_shape, DType::i64);
  LOOM_DISPATCH_FLOATING(x.dtype(), "topk", [&] {
    const scalar_t* px = xc.data<scalar_t>();
    scalar_t* pv = values.data<scalar_t>();
    int64_t* pi = indices.data<int64_t>();
    parallel_for(0, rows, 16, [&](int64_t b, int64_t e) {
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t r = b; r < e; ++r) {
        const scalar_t* row = px + r * n;
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t i, int64_t j) {
          double a = cast_scalar<double>(row[i]), c = cast_scalar<double>(row[j]);
          return a > c || (a == c && i < j);
        });
        for (int64_t j = 0; j < k; ++j) {
          pv[r * k + j] = row[order[j]];
          pi[r * k + j] = order[j];
        }
      }
    });
  });
}

}  // namespace loom::kernels::cpu
