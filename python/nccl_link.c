/* The wheel's lib/shunt/libnccl.so.2 (python/CMakeLists.txt): no code of its own; what it is for
 * is its dependency on libshunt.so. A translation unit must declare something, so it says what it
 * is to anyone reading the file. */
__attribute__((visibility("hidden"))) const char shunt_nccl_link_note[] = "libnccl.so.2: loads libshunt.so";
