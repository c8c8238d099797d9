// The Responses API request's translation to the chat request it stands for.
#include "server/responses.h"

#include <gtest/gtest.h>

namespace cpm {
namespace {

using Json = nlohmann::ordered_json;

Json Translate(const std::string& body, std::vector<std::string>* ignored = nullptr) {
  std::vector<std::string> unused;
  auto r = ChatRequestFromResponses(Json::parse(body, nullptr, false), ignored ? ignored : &unused);
  EXPECT_TRUE(r.ok()) << body << ": " << r.status().message();
  return r.ok() ? *r : Json();
}

std::string ErrorOf(const std::string& body) {
  std::vector<std::string> ignored;
  auto r = ChatRequestFromResponses(Json::parse(body, nullptr, false), &ignored);
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? "" : r.status().message();
}

TEST(ResponsesRequest, StringInputAndInstructions) {
  const Json chat = Translate(
      R"({"model": "m", "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 7,
          "temperature": 0.5, "top_p": 0.9, "store": true, "metadata": {"a": "b"}})");
  EXPECT_EQ(chat["model"], "m");
  EXPECT_EQ(chat["messages"], Json::parse(R"([{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "Hi"}])"));
  EXPECT_EQ(chat["max_tokens"], 7);
  EXPECT_EQ(chat["temperature"], 0.5);
  EXPECT_EQ(chat["top_p"], 0.9);
  EXPECT_FALSE(chat.contains("store"));
  EXPECT_FALSE(chat.contains("stream"));
  // Empty instructions add no system message (vLLM tests them for truth).
  EXPECT_EQ(Translate(R"({"input": "Hi", "instructions": ""})")["messages"],
            Json::parse(R"([{"role": "user", "content": "Hi"}])"));
  std::vector<std::string> ignored;
  EXPECT_EQ(ChatRequestFromResponses(Json::parse(R"({"input": "Hi", "prompt": {"id": "p"}})"),
                                     &ignored).status().message(),
            "prompt template is not supported");
}

TEST(ResponsesRequest, InputItemsBecomeMessages) {
  const Json chat = Translate(R"({"input": [
      {"role": "developer", "content": "Rules."},
      {"type": "message", "role": "user", "content": [
          {"type": "input_text", "text": "Look:"},
          {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [],
       "content": [{"type": "reasoning_text", "text": "Think."}]},
      {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
       "content": [{"type": "output_text", "text": "Calling.", "annotations": []}]},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\": 1}"},
      {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "42"},
      {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "S."}]},
      {"type": "function_call", "call_id": "c3", "name": "h", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c3", "output": "7"},
      {"role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}]})");
  // vLLM's construct_chat_messages_with_tool_call: an assistant turn's reasoning, text and
  // calls fold into one chat message (each joins the message before it while that has none).
  const Json expected = Json::parse(R"([
      {"role": "developer", "content": "Rules."},
      {"role": "user", "content": [{"type": "text", "text": "Look:"},
                                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
      {"role": "assistant", "reasoning": "Think.", "content": "Calling.", "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
          {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"},
      {"role": "assistant", "reasoning": "S.", "tool_calls": [
          {"id": "c3", "type": "function", "function": {"name": "h", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c3", "content": "7"},
      {"role": "assistant", "content": "Done."}])");
  EXPECT_EQ(chat["messages"], expected) << chat["messages"].dump(1);
  std::vector<std::string> ignored;
  EXPECT_EQ(ChatRequestFromResponses(Json::parse(R"({"input": [{"type": "reasoning", "id": "r",
                "summary": [], "encrypted_content": "xyz"}]})"), &ignored).status().message(),
            "Encrypted content is not supported.");
  EXPECT_FALSE(ChatRequestFromResponses(Json::parse(R"({"input": [{"type": "reasoning", "id": "r",
                   "summary": [1]}]})"), &ignored).ok());
}

TEST(ResponsesRequest, ToolsFormatsAndStreaming) {
  const Json chat = Translate(R"({"input": "x", "stream": true,
      "tools": [{"type": "function", "name": "get", "description": "d",
                 "parameters": {"type": "object"}, "strict": true}],
      "tool_choice": {"type": "function", "name": "get"},
      "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}, "strict": true}}})");
  // vLLM's construct_tool_dicts: openai's FunctionTool dump (its fields' order) as the function.
  EXPECT_EQ(chat["tools"].dump(),
            Json::parse(R"([{"type": "function", "function": {"name": "get",
      "parameters": {"type": "object"}, "strict": true, "type": "function", "description": "d"}}])")
                .dump());
  EXPECT_EQ(Translate(R"({"input": "x", "tools": [{"type": "function", "name": "f"}]})")["tools"]
                .dump(),
            R"([{"type":"function","function":{"name":"f","parameters":null,"strict":null,)"
            R"("type":"function","description":null}}])");
  // tool_choice "none": the tools stay out of the prompt (vLLM drops them).
  EXPECT_FALSE(Translate(R"({"input": "x", "tool_choice": "none",
      "tools": [{"type": "function", "name": "f"}]})").contains("tools"));
  EXPECT_EQ(chat["tool_choice"], Json::parse(R"({"type": "function", "function": {"name": "get"}})"));
  EXPECT_EQ(chat["response_format"], Json::parse(R"({"type": "json_schema", "json_schema":
      {"name": "s", "schema": {"type": "object"}, "strict": true}})"));
  EXPECT_EQ(chat["stream"], true);
  EXPECT_EQ(chat["stream_options"], Json::parse(R"({"include_usage": true})"));
  EXPECT_EQ(Translate(R"({"input": "x", "text": {"format": {"type": "json_object"}}})")["response_format"],
            Json::parse(R"({"type": "json_object"})"));
  EXPECT_FALSE(Translate(R"({"input": "x", "text": {"format": {"type": "text"}}})").contains("response_format"));
  // A client's default "auto" without tools asks for nothing.
  EXPECT_FALSE(Translate(R"({"input": "x", "tool_choice": "auto"})").contains("tool_choice"));
  EXPECT_EQ(Translate(R"({"input": "x", "tool_choice": "required", "tools": [{"type": "function", "name": "f"}]})")["tool_choice"],
            "required");
}

TEST(ResponsesRequest, UnknownFieldsAreReportedAndExtrasPassed) {
  std::vector<std::string> ignored;
  const Json chat = Translate(R"({"input": "x", "top_k": 5, "seed": 3, "frobnicate": 1})", &ignored);
  EXPECT_EQ(chat["top_k"], 5);
  EXPECT_EQ(chat["seed"], 3);
  EXPECT_EQ(ignored, std::vector<std::string>{"frobnicate"});
  // vLLM's ResponsesRequest fields the chat request takes as they are.
  ignored.clear();
  const Json extras = Translate(R"({"input": "x", "include_stop_str_in_output": true,
      "skip_special_tokens": false, "include_reasoning": false, "mm_processor_kwargs": {"a": 1},
      "vllm_xargs": {"k": "v"}})", &ignored);
  EXPECT_TRUE(ignored.empty()) << ignored.front();
  EXPECT_EQ(extras["include_stop_str_in_output"], true);
  EXPECT_EQ(extras["skip_special_tokens"], false);
  EXPECT_EQ(extras["include_reasoning"], false);
}

// vLLM's build_chat_params: reasoning.effort drives the template's thinking, truncation "auto"
// cuts the prompt to fit, and a last assistant item left in progress is continued.
TEST(ResponsesRequest, ReasoningTruncationAndContinuation) {
  Json chat = Translate(R"({"input": "x", "reasoning": {"effort": "high"}, "truncation": "auto"})");
  EXPECT_EQ(chat["reasoning_effort"], "high");
  EXPECT_EQ(chat["truncate_prompt_tokens"], -1);
  chat = Translate(R"({"input": "x", "reasoning": null, "truncation": "disabled"})");
  EXPECT_FALSE(chat.contains("reasoning_effort"));
  EXPECT_FALSE(chat.contains("truncate_prompt_tokens"));
  for (const char* status : {"in_progress", "incomplete"}) {
    chat = Translate(std::string(R"({"input": [{"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "status": ")") + status +
                     R"(", "content": [{"type": "output_text", "text": "Sure, the"}]}]})");
    EXPECT_EQ(chat["continue_final_message"], true) << status;
    EXPECT_EQ(chat["add_generation_prompt"], false) << status;
  }
  chat = Translate(R"({"input": [{"role": "user", "content": "hi"},
      {"type": "message", "role": "assistant", "status": "completed",
       "content": [{"type": "output_text", "text": "Done."}]}]})");
  EXPECT_FALSE(chat.contains("continue_final_message"));
}

TEST(ResponsesRequest, IncludeOutputLogprobs) {
  Json chat = Translate(
      R"({"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 3})");
  EXPECT_EQ(chat["logprobs"], true);
  EXPECT_EQ(chat["top_logprobs"], 3);
  chat = Translate(R"({"input": "x", "include": ["message.output_text.logprobs"]})");
  EXPECT_EQ(chat["top_logprobs"], 0);  // vLLM's default
  // top_logprobs alone, or other includable values, ask for nothing.
  EXPECT_FALSE(Translate(R"({"input": "x", "top_logprobs": 3})").contains("logprobs"));
  EXPECT_FALSE(Translate(R"({"input": "x", "include": ["reasoning.encrypted_content"]})")
                   .contains("logprobs"));
  EXPECT_NE(ErrorOf(R"({"input": "x", "include": ["message.output_text.logprob"]})")
                .find("'message.output_text.logprobs'"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"input": "x", "include": "message.output_text.logprobs"})")
                .find("include"),
            std::string::npos);
}

TEST(ResponsesRequest, UnsupportedRequestsAreClientErrors) {
  EXPECT_NE(ErrorOf(R"({"model": "m"})").find("input"), std::string::npos);
  EXPECT_NE(ErrorOf("not json").find("JSON decode error"), std::string::npos);
  // Nothing is stored: vLLM's 404 for an id it does not hold.
  std::vector<std::string> ignored;
  const auto previous = ChatRequestFromResponses(
      Json::parse(R"({"input": "x", "previous_response_id": "resp_1"})"), &ignored);
  EXPECT_EQ(previous.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(previous.status().message(), "Response with id 'resp_1' not found.");
  EXPECT_EQ(previous.status().param(), "response_id");
  EXPECT_NE(ErrorOf(R"({"input": "x", "tools": [{"type": "web_search"}]})").find("'web_search'"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"input": [{"type": "item_reference", "id": "x"}]})").find("item_reference"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]})")
                .find("input_file"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]})")
                .find("file_id"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"input": [{"role": "critic", "content": "x"}]})").find("critic"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"input": "x", "text": {"format": {"type": "grammar"}}})").find("grammar"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"input": "x", "background": true})").find("background"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"input": 3})").find("input"), std::string::npos);
}

// Every field of a client's request with values of every JSON type: a translation or a 400,
// never an exception (which the server would answer with a 500).
TEST(ResponsesRequest, WrongTypesAreErrorsNotExceptions) {
  const std::vector<Json> junk = {
      nullptr, 1, -1.5, "s", true, Json::array(), Json::object(), Json::array({1}),
      Json::array({nullptr}), Json::array({Json::object()}), Json{{"type", 1}},
      Json::array({Json{{"type", 1}}}), Json::array({Json{{"role", 1}, {"content", 1}}}),
      Json::array({Json{{"role", "user"}, {"content", Json::array({Json{{"type", "input_image"}}})}}}),
      Json::array({Json{{"type", "function_call"}, {"call_id", 1}, {"name", Json::array()}}}),
      Json{{"format", Json{{"type", "json_schema"}, {"name", 3}}}}, Json{{"format", 1}}};
  const char* keys[] = {"model", "input", "instructions", "tools", "tool_choice", "text",
                        "max_output_tokens", "stream", "background", "previous_response_id",
                        "temperature", "metadata", "reasoning", "include", "top_logprobs"};
  for (const char* key : keys) {
    for (const Json& value : junk) {
      Json request = {{"model", "m"}, {"input", "x"}};
      request[key] = value;
      std::vector<std::string> ignored;
      EXPECT_NO_THROW({ (void)ChatRequestFromResponses(request, &ignored); }) << request.dump();
    }
  }
  std::vector<std::string> ignored;
  EXPECT_FALSE(ChatRequestFromResponses(Json{{"input", "x"}, {"stream", "maybe"}}, &ignored).ok());
}

}  // namespace
}  // namespace cpm
