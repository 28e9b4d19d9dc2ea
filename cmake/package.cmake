# `cmake --install` and the Debian package (cpack -G DEB, in the build tree:
# neuron_<version>_amd64.deb). Its Depends come from the libraries the binary
# links (dpkg-shlibdeps) plus adduser for the `neuron` system user.
include(GNUInstallDirs)
install(TARGETS neuron RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The bundled tiny model: `neuron serve` with no model serves it (smoke tests).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/qwen3-tiny-a DESTINATION ${CMAKE_INSTALL_DATADIR}/neuron/models)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/neuron.service DESTINATION lib/systemd/system)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/config.json DESTINATION /etc/neuron)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME neuron)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "LLM node daemon for Qwen3-family models (OpenAI-compatible HTTP API)")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "neuron maintainers <neuron@localhost>")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS adduser)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS systemd)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/debian/conffiles ${PROJECT_SOURCE_DIR}/packaging/debian/postinst
    ${PROJECT_SOURCE_DIR}/packaging/debian/prerm ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_OUTPUT_FILE_PREFIX ${PROJECT_BINARY_DIR}/packages)
include(CPack)
