// Video decoding through FFmpeg's libraries (see video.h): demux from memory, count the video
// stream's packets, then decode again and keep the sampled frames as RGB.
#include "multimodal/video.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libswscale/swscale.h>
}

namespace cpm {
namespace {

std::string AvError(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, buf, sizeof buf);
  return buf;
}

// The request's bytes as an AVIOContext's source.
struct MemoryReader {
  std::string_view data;
  int64_t pos = 0;

  static int Read(void* opaque, uint8_t* buf, int size) {
    auto* r = static_cast<MemoryReader*>(opaque);
    const int64_t n = std::min<int64_t>(size, static_cast<int64_t>(r->data.size()) - r->pos);
    if (n <= 0) return AVERROR_EOF;
    std::memcpy(buf, r->data.data() + r->pos, static_cast<size_t>(n));
    r->pos += n;
    return static_cast<int>(n);
  }

  static int64_t Seek(void* opaque, int64_t offset, int whence) {
    auto* r = static_cast<MemoryReader*>(opaque);
    const int64_t size = static_cast<int64_t>(r->data.size());
    if (whence & AVSEEK_SIZE) return size;
    int64_t base = 0;
    switch (whence & ~AVSEEK_FORCE) {
      case SEEK_SET: base = 0; break;
      case SEEK_CUR: base = r->pos; break;
      case SEEK_END: base = size; break;
      default: return AVERROR(EINVAL);
    }
    if (offset > size - base || base + offset < 0) return AVERROR(EINVAL);
    r->pos = base + offset;
    return r->pos;
  }
};

// The containers a request's video may come in: self-contained ones only. Others name further
// resources that libavformat would open: a concat script (probed by its first line) its files,
// an HLS or DASH manifest its segments, an image2 pattern its images.
constexpr const char* kContainers =
    "mov,mp4,matroska,webm,avi,flv,mpegts,mpeg,ogg,asf,ivf,h264,hevc,gif,mjpeg";

// An opened container over `bytes` and its best video stream. Each pass opens its own.
class Demuxer {
 public:
  static StatusOr<std::unique_ptr<Demuxer>> Open(std::string_view bytes) {
    std::unique_ptr<Demuxer> d(new Demuxer);
    d->reader_.data = bytes;
    constexpr int kBufferBytes = 64 * 1024;
    auto* buffer = static_cast<uint8_t*>(av_malloc(kBufferBytes));
    if (buffer == nullptr) return ResourceExhausted("video: out of memory");
    d->avio_ = avio_alloc_context(buffer, kBufferBytes, 0, &d->reader_, &MemoryReader::Read,
                                  nullptr, &MemoryReader::Seek);
    if (d->avio_ == nullptr) {
      av_free(buffer);
      return ResourceExhausted("video: out of memory");
    }
    d->fmt_ = avformat_alloc_context();
    if (d->fmt_ == nullptr) return ResourceExhausted("video: out of memory");
    d->fmt_->pb = d->avio_;
    d->fmt_->flags |= AVFMT_FLAG_CUSTOM_IO;
    // A request's bytes must never make the server open a file or a connection: only
    // self-contained containers, and no protocol for anything they might name.
    AVDictionary* options = nullptr;
    av_dict_set(&options, "format_whitelist", kContainers, 0);
    av_dict_set(&options, "protocol_whitelist", "none", 0);
    // On failure avformat_open_input frees the context (but not our I/O).
    const int rc = avformat_open_input(&d->fmt_, nullptr, nullptr, &options);
    av_dict_free(&options);
    if (rc < 0)
      return InvalidArgument("video: the data is not a video this server can read (" + AvError(rc) + ")");
    if (int rc = avformat_find_stream_info(d->fmt_, nullptr); rc < 0)
      return InvalidArgument("video: cannot read the file's streams (" + AvError(rc) + ")");
    d->stream_ = av_find_best_stream(d->fmt_, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    if (d->stream_ < 0) return InvalidArgument("video: the file has no video stream");
    return d;
  }

  ~Demuxer() {
    avformat_close_input(&fmt_);
    if (avio_ != nullptr) {
      av_freep(&avio_->buffer);  // libavformat may have replaced the buffer we gave it
      avio_context_free(&avio_);
    }
  }

  AVFormatContext* fmt() const { return fmt_; }
  int stream() const { return stream_; }
  const AVCodecParameters* codecpar() const { return fmt_->streams[stream_]->codecpar; }

 private:
  Demuxer() = default;
  MemoryReader reader_;
  AVIOContext* avio_ = nullptr;
  AVFormatContext* fmt_ = nullptr;
  int stream_ = -1;
};

struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct FrameDeleter {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct CodecDeleter {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
// The conversion context, which sws_getCachedContext may replace frame by frame.
struct SwsHolder {
  SwsContext* context = nullptr;
  ~SwsHolder() { sws_freeContext(context); }
};
using Packet = std::unique_ptr<AVPacket, PacketDeleter>;

// Frames of the video stream, as packets in the file (one per coded frame).
StatusOr<int64_t> CountFrames(std::string_view bytes) {
  CPM_ASSIGN_OR_RETURN(std::unique_ptr<Demuxer> d, Demuxer::Open(bytes));
  Packet pkt(av_packet_alloc());
  if (!pkt) return ResourceExhausted("video: out of memory");
  int64_t count = 0;
  while (av_read_frame(d->fmt(), pkt.get()) >= 0) {
    if (pkt->stream_index == d->stream()) ++count;
    av_packet_unref(pkt.get());
  }
  return count;
}

// `frame` as RGB, converted by libswscale (bicubic, as OpenCV's FFmpeg capture asks; at the same
// size only its YUV → RGB conversion acts).
StatusOr<RgbImage> ToRgb(const AVFrame* frame, SwsContext** sws) {
  const int w = frame->width, h = frame->height;
  if (w <= 0 || h <= 0) return InvalidArgument("video: a frame has no size");
  if (static_cast<int64_t>(w) * h > kMaxImagePixels)
    return InvalidArgument("video: frames of " + std::to_string(w) + "x" + std::to_string(h) +
                           " pixels are too large");
  *sws = sws_getCachedContext(*sws, w, h, static_cast<AVPixelFormat>(frame->format), w, h,
                              AV_PIX_FMT_RGB24, SWS_BICUBIC, nullptr, nullptr, nullptr);
  if (*sws == nullptr) return InvalidArgument("video: cannot convert the frames' pixel format to RGB");
  // swscale may write a little past a row's end: rows of a padded buffer, copied out after.
  const int stride = (3 * w + 63) / 64 * 64 + 64;
  std::vector<uint8_t> buffer(static_cast<size_t>(stride) * (h + 1));
  uint8_t* dst[4] = {buffer.data(), nullptr, nullptr, nullptr};
  const int dst_stride[4] = {stride, 0, 0, 0};
  if (sws_scale(*sws, frame->data, frame->linesize, 0, h, dst, dst_stride) != h)
    return InvalidArgument("video: converting a frame to RGB failed");
  RgbImage image = BlankRgbImage(w, h);
  for (int y = 0; y < h; ++y) {
    std::memcpy(image.pixels.data() + static_cast<size_t>(y) * 3 * w,
                buffer.data() + static_cast<size_t>(y) * stride, static_cast<size_t>(3) * w);
  }
  return image;
}

// Decodes the video stream and hands over the frames at `wanted` (ascending, in decoding order).
StatusOr<int64_t> DecodeFrames(std::string_view bytes, const std::vector<int64_t>& wanted,
                               const std::function<Status(const RgbImage&)>& on_frame) {
  CPM_ASSIGN_OR_RETURN(std::unique_ptr<Demuxer> d, Demuxer::Open(bytes));
  const AVCodec* codec = avcodec_find_decoder(d->codecpar()->codec_id);
  if (codec == nullptr)
    return InvalidArgument(std::string("video: no decoder for its codec '") +
                           avcodec_get_name(d->codecpar()->codec_id) + "'");
  std::unique_ptr<AVCodecContext, CodecDeleter> ctx(avcodec_alloc_context3(codec));
  if (!ctx) return ResourceExhausted("video: out of memory");
  if (int rc = avcodec_parameters_to_context(ctx.get(), d->codecpar()); rc < 0)
    return InvalidArgument("video: bad codec parameters (" + AvError(rc) + ")");
  // Decoded on the calling HTTP thread alone: the compute cores belong to the model.
  ctx->thread_count = 1;
  if (int rc = avcodec_open2(ctx.get(), codec, nullptr); rc < 0)
    return InvalidArgument("video: cannot open its decoder (" + AvError(rc) + ")");
  Packet pkt(av_packet_alloc());
  std::unique_ptr<AVFrame, FrameDeleter> frame(av_frame_alloc());
  if (!pkt || !frame) return ResourceExhausted("video: out of memory");
  SwsHolder sws;
  int64_t index = 0;
  size_t next = 0;
  int last_error = 0;
  // Receives every frame the decoder has ready.
  const auto drain = [&]() -> Status {
    for (;;) {
      const int rc = avcodec_receive_frame(ctx.get(), frame.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return OkStatus();
      if (rc < 0) {
        last_error = rc;
        return OkStatus();
      }
      if (next < wanted.size() && wanted[next] == index) {
        CPM_ASSIGN_OR_RETURN(RgbImage image, ToRgb(frame.get(), &sws.context));
        CPM_RETURN_IF_ERROR(on_frame(image));
        ++next;
      }
      ++index;
      av_frame_unref(frame.get());
    }
  };
  bool more = true;
  while (more && next < wanted.size()) {
    more = av_read_frame(d->fmt(), pkt.get()) >= 0;
    if (more && pkt->stream_index != d->stream()) {
      av_packet_unref(pkt.get());
      continue;
    }
    // A packet the decoder refuses (a damaged frame) is skipped, as players and OpenCV do.
    const int rc = avcodec_send_packet(ctx.get(), more ? pkt.get() : nullptr);
    if (more) av_packet_unref(pkt.get());
    if (rc < 0 && rc != AVERROR_EOF) last_error = rc;
    CPM_RETURN_IF_ERROR(drain());
  }
  if (next == 0)
    return InvalidArgument("video: no frame could be decoded" +
                           (last_error != 0 ? " (" + AvError(last_error) + ")" : std::string()));
  return static_cast<int64_t>(next);
}

}  // namespace

std::vector<int64_t> VideoFrameIndices(int64_t total, int64_t num_frames) {
  std::vector<int64_t> out;
  if (total <= 0) return out;
  if (num_frames < 0 || total < num_frames) {
    for (int64_t i = 0; i < total; ++i) out.push_back(i);
    return out;
  }
  if (num_frames == 0) return out;
  if (num_frames == 1) return {0};
  // np.linspace: i · step (float64) with the last point set to the end exactly, then truncated.
  const double step = static_cast<double>(total - 1) / static_cast<double>(num_frames - 1);
  for (int64_t i = 0; i + 1 < num_frames; ++i) {
    out.push_back(static_cast<int64_t>(static_cast<double>(i) * step));
  }
  out.push_back(total - 1);
  return out;
}

StatusOr<int64_t> DecodeVideo(std::string_view bytes, int64_t num_frames,
                              const std::function<Status(const RgbImage&)>& on_frame) {
  static std::once_flag quiet;
  // Client data must not fill the server's log with the decoders' complaints.
  std::call_once(quiet, [] { av_log_set_level(AV_LOG_QUIET); });
  if (num_frames == 0 || num_frames < -1)
    return InvalidArgument("video: num_frames must be positive or -1 (every frame)");
  CPM_ASSIGN_OR_RETURN(int64_t total, CountFrames(bytes));
  if (total == 0) return InvalidArgument("video: the video stream has no frames");
  const std::vector<int64_t> wanted = VideoFrameIndices(total, num_frames);
  if (static_cast<int64_t>(wanted.size()) > kMaxVideoFrames)
    return InvalidArgument("video: " + std::to_string(wanted.size()) + " frames to keep, more than " +
                           std::to_string(kMaxVideoFrames));
  return DecodeFrames(bytes, wanted, on_frame);
}

}  // namespace cpm
