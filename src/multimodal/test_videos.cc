// Test-only video encoder (see test_videos.h).
#include "multimodal/test_videos.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/log.h>
#include <libswscale/swscale.h>
}

namespace cpm::test_videos {

// Frame i's colour: far apart from its neighbours' so lossy coding cannot confuse them.
void FrameColour(int i, uint8_t rgb[3]) {
  rgb[0] = static_cast<uint8_t>(40 + (i * 53) % 180);
  rgb[1] = static_cast<uint8_t>(40 + (i * 97) % 180);
  rgb[2] = static_cast<uint8_t>(40 + (i * 29) % 180);
}

// A `frames`-frame video of w × h solid-colour frames, `codec` in `container` ("mp4", "avi"),
// through a temporary file; empty on failure (the test then fails on it).
std::string EncodeTestVideo(int frames, int w, int h, const char* codec_name, const char* container) {
  av_log_set_level(AV_LOG_ERROR);  // the encoders' statistics are not the test's output
  char path[] = "/tmp/cpm_video_testXXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return {};
  close(fd);
  std::string out;
  AVFormatContext* fmt = nullptr;
  avformat_alloc_output_context2(&fmt, nullptr, container, path);
  const AVCodec* codec = avcodec_find_encoder_by_name(codec_name);
  AVCodecContext* enc = codec ? avcodec_alloc_context3(codec) : nullptr;
  if (fmt && enc) {
    AVStream* st = avformat_new_stream(fmt, nullptr);
    enc->width = w;
    enc->height = h;
    enc->time_base = AVRational{1, 25};
    enc->framerate = AVRational{25, 1};
    const std::string name = codec_name;
    enc->pix_fmt = name == "mjpeg" ? AV_PIX_FMT_YUVJ420P
                   : name == "gif" ? AV_PIX_FMT_RGB8  // a fixed 256-colour palette
                                   : AV_PIX_FMT_YUV420P;
    enc->gop_size = 4;  // P-frames between key frames: decoding must carry state across them
    enc->bit_rate = 2000000;
    if (fmt->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if (avcodec_open2(enc, codec, nullptr) >= 0 &&
        avcodec_parameters_from_context(st->codecpar, enc) >= 0 &&
        avio_open(&fmt->pb, path, AVIO_FLAG_WRITE) >= 0 && avformat_write_header(fmt, nullptr) >= 0) {
      st->time_base = st->time_base.num ? st->time_base : enc->time_base;
      AVFrame* frame = av_frame_alloc();
      frame->format = enc->pix_fmt;
      frame->width = w;
      frame->height = h;
      av_frame_get_buffer(frame, 0);
      SwsContext* sws = sws_getContext(w, h, AV_PIX_FMT_RGB24, w, h, enc->pix_fmt, SWS_BICUBIC,
                                       nullptr, nullptr, nullptr);
      std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3 + 64);
      AVPacket* pkt = av_packet_alloc();
      const auto flush_packets = [&] {
        while (avcodec_receive_packet(enc, pkt) == 0) {
          pkt->duration = 1;  // one frame; without it MP4 drops the last sample
          av_packet_rescale_ts(pkt, enc->time_base, st->time_base);
          pkt->stream_index = st->index;
          av_interleaved_write_frame(fmt, pkt);
        }
      };
      for (int i = 0; i < frames; ++i) {
        uint8_t c[3];
        FrameColour(i, c);
        for (int p = 0; p < w * h; ++p) std::copy(c, c + 3, rgb.data() + 3 * p);
        av_frame_make_writable(frame);
        const uint8_t* src[4] = {rgb.data(), nullptr, nullptr, nullptr};
        const int src_stride[4] = {3 * w, 0, 0, 0};
        sws_scale(sws, src, src_stride, 0, h, frame->data, frame->linesize);
        frame->pts = i;
        avcodec_send_frame(enc, frame);
        flush_packets();
      }
      avcodec_send_frame(enc, nullptr);
      flush_packets();
      av_write_trailer(fmt);
      av_packet_free(&pkt);
      sws_freeContext(sws);
      av_frame_free(&frame);
      avio_closep(&fmt->pb);
      std::ifstream in(path, std::ios::binary);
      out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  avcodec_free_context(&enc);
  avformat_free_context(fmt);
  std::remove(path);
  return out;
}

}  // namespace cpm::test_videos
