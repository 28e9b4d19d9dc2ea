# End-to-end tests of the daemon: a real `neuron serve` on loopback driven by
# curl, the official openai npm client, scripts/validate-neuron.sh and the
# structured output clients (ajv, AI SDK, LangChain JS), and the web UI in
# chromium (puppeteer-core).
# Label e2e; no-sanitize because they time real generation. Exit 77 = skipped.
foreach(_e2e_script daemon_curl daemon_openai_node daemon_responses_node daemon_validate daemon_structured_output daemon_web_ui
                    daemon_embeddings_node)
  add_test(NAME e2e_${_e2e_script} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/${_e2e_script}.sh $<TARGET_FILE:neuron>)
  set_tests_properties(e2e_${_e2e_script} PROPERTIES LABELS "e2e;no-sanitize" TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
endforeach()
