# End-to-end tests of the daemon: a real `neuron serve` on loopback driven by
# curl, the official openai npm client, scripts/validate-neuron.sh and the
# structured output clients (ajv, AI SDK, LangChain JS), and the web UI in
# chromium (puppeteer-core).
# Label e2e; no-sanitize because they time real generation. Exit 77 = skipped. They run beside the other tests
# (each waits for its daemon with minutes of slack); the ones sharing an npm folder take turns, since
# npm_install (daemon_lib.sh) may rebuild its node_modules.
foreach(_e2e_script daemon_curl daemon_openai_node daemon_responses_node daemon_validate daemon_structured_output daemon_web_ui
                    daemon_embeddings_node)
  add_test(NAME e2e_${_e2e_script} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/${_e2e_script}.sh $<TARGET_FILE:neuron>)
  set_tests_properties(e2e_${_e2e_script} PROPERTIES LABELS "e2e;no-sanitize" TIMEOUT 600 SKIP_RETURN_CODE 77
                       ${NEURON_TEST_ENV})
endforeach()
set_tests_properties(e2e_daemon_openai_node e2e_daemon_responses_node e2e_daemon_structured_output
                     e2e_daemon_embeddings_node PROPERTIES RESOURCE_LOCK e2e_npm_node)
set_tests_properties(e2e_daemon_web_ui PROPERTIES RESOURCE_LOCK e2e_npm_browser)
