# Per-generator CPack settings (CPACK_PROJECT_CONFIG_FILE): the .tar.gz is a
# relocatable prefix of its own (bin/, include/, lib/...), the .debs install to /usr.
if(CPACK_GENERATOR STREQUAL "TGZ")
  set(CPACK_PACKAGING_INSTALL_PREFIX "")
endif()
