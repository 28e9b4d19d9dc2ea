# The Debian package and the systemd unit: build neuron_<version>_amd64.deb with
# CPack, verify the unit with systemd-analyze, install the package into a
# temporary root with dpkg and start the installed binary (package_deb.sh).
add_test(NAME e2e_package_deb COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/package_deb.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e_package_deb PROPERTIES LABELS "e2e;no-sanitize" TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
